// (p, p2) History: agent steps per second of one conversation whose user has N finished and N deleted
// conversations, vs one of a user with none, in the same node. The node runs clustered, as `tether serve` on
// NATS always does: only then does each start of running read the user's index for the per-user cap. The
// history is built by a second, solo Tether on the same stores, so that building it reads no index.
import { performance } from 'node:perf_hooks';
import { jetstreamManager } from '@nats-io/jetstream';
import pLimit from 'p-limit';
import { CreateConversationBody, type AgentState, type LoggedEvent } from '../../protocol/index.ts';
import { scriptedAgent } from '../../src/agent/index.ts';
import { silentLogger } from '../../src/logger.ts';
import { MemoryRuntime, type CommandHandler } from '../../src/runtime/memoryRuntime.ts';
import { connectNats, jetStreamStores, kvClusterStore, natsClusterBus } from '../../src/store/index.ts';
import type { NatsConnection, Stores } from '../../src/store/index.ts';
import { createTether, type Tether } from '../../src/tether.ts';
import { deleteStores, storeNames } from '../harness/host.ts';
import { fmt, median, progress, timed, track, until, untrack } from '../harness/measure.ts';
import { Proc } from '../harness/proc.ts';
import { repeat, reps, type Ctx, type Row, type Scenario } from '../harness/scenario.ts';

const HERE = import.meta.url;
const LONG = 1_800_000;
const [NONE, KEPT] = ['history-none', 'history-kept']; // the baseline's user; the user with the history
const PAGED = 'history-page'; // a user with exactly one page of conversations: the list rows' baseline
const [PAGE, PAGE_READS] = [100, 20]; // a list page's limit (the API's default); pages read per side
const [ROUNDS, QUICK_ROUNDS] = [10, 4]; // each round two agent steps: the command, then the summary of its output
const CONCURRENCY = 24; // conversations built at a time
const LEASE_MS = 5_000;
const clusterNames = (tag: string) => ({ nodes: `bench_${tag}_nodes`, owners: `bench_${tag}_owners` });

// In a host process: its Tether, the measured conversations, the index reads under way and done.
type Conv = { id: string; last: number; wake: () => void };
let here: { tether: Tether; nc: NatsConnection; stores: Stores; convs: Map<string, Conv> } | undefined;
const reads = { running: 0, done: 0, ms: 0 };
const held = new Map<string, () => void>(); // `hold <id>` commands, until released
let sent = 0;
function hosted() {
  if (!here) throw new Error('no Tether runs in this process');
  return here;
}

/** Every command prints 16 lines of 64 characters (as agentstep's `cat`); `hold <id>` first waits to be released. */
const handler: CommandHandler = async (command) => {
  if (command.startsWith('hold ')) await new Promise<void>((resolve) => held.set(command.slice(5), resolve));
  const output = Array.from({ length: 16 }, (_, i) => `${command} line ${i} `.padEnd(63, '.') + '\n').join('');
  return { exit_code: 0, output, timed_out: false, truncated: false };
};

/** Counts and times the store's reads of a user's index: `list` (pages), and `running` where a store has it. */
function countReads(conversations: object): void {
  const methods = conversations as Record<string, unknown>;
  for (const name of ['list', 'running']) {
    const read = methods[name];
    if (typeof read !== 'function') continue;
    methods[name] = async (...args: unknown[]): Promise<unknown> => {
      const t0 = performance.now();
      reads.running++;
      try {
        return await (read as (...a: unknown[]) => Promise<unknown>).apply(conversations, args);
      } finally {
        reads.running--;
        reads.done++;
        reads.ms += performance.now() - t0;
      }
    };
  }
}

/** In a host process: a Tether on the tag's stores, a node of a one-node cluster or solo (the builder). */
export async function start(natsUrl: string, tag: string, clustered: boolean): Promise<void> {
  const nc = await connectNats(natsUrl, { name: `tether-bench-${tag}-${clustered ? 'node' : 'builder'}` });
  const stores = await jetStreamStores(nc, storeNames(tag));
  countReads(stores.conversations);
  const { nodes, owners } = clusterNames(tag);
  const cluster = clustered && {
    nodeId: 'history-node',
    leaseMs: LEASE_MS,
    store: await kvClusterStore(nc, { leaseMs: LEASE_MS, nodesBucket: nodes, ownersBucket: owners }),
    bus: natsClusterBus(nc, `bench.${tag}.node`),
  };
  const tether = createTether({
    stores,
    runtimes: { create: (id, o) => new MemoryRuntime(id, handler, o) },
    agent: scriptedAgent(),
    logger: silentLogger,
    // The builder runs CONCURRENCY of the user's conversations at once: the per-user cap (3) would cut them.
    ...(cluster ? { cluster } : { limits: { maxRunningPerUser: 2 * CONCURRENCY } }),
  });
  await tether.start();
  here = { tether, nc, stores, convs: new Map() };
}

export async function stop(): Promise<void> {
  await here?.tether.close();
  await here?.nc.close();
  here = undefined;
}

async function reaches(id: string, user: string, state: AgentState): Promise<void> {
  const { host } = hosted().tether;
  const probe = async () => ((await host.session(id, user)).state === state ? true : undefined);
  await until(`${id} ${state}`, probe, 60_000, 5);
}

/** Answers a message, runs a command the user pauses, is resumed with nothing to answer and finishes; passivated. */
async function finished(user: string): Promise<string> {
  const { host } = hosted().tether;
  const body = CreateConversationBody.parse({ initial_message: 'hello' });
  const { conversation_id: id } = await host.commands.create(user, body);
  await reaches(id, user, 'awaiting_user_input');
  await host.commands.act(id, user, { type: 'run', command: `hold ${id}` });
  await host.commands.act(id, user, { type: 'change_agent_state', state: 'paused' });
  (await until(`${id} holding`, async () => held.get(id), 60_000, 5))();
  held.delete(id);
  await reaches(id, user, 'paused');
  await host.commands.act(id, user, { type: 'change_agent_state', state: 'running' });
  await reaches(id, user, 'finished');
  await host.passivate(id, 'idle');
  return id;
}

/** Created, started (awaiting input), then deleted as `DELETE /api/conversations/:id` does. */
async function deleted(user: string): Promise<string> {
  const { host } = hosted().tether;
  const { conversation_id: id } = await host.commands.create(user, CreateConversationBody.parse({}));
  await reaches(id, user, 'awaiting_user_input');
  await host.commands.delete(id, user);
  return id;
}

/** In the builder: `n` finished and `n` deleted conversations of `user`, then each one's entry read back; ms. */
export async function grow(user: string, n: number, had: number): Promise<number> {
  const [t0, limit] = [performance.now(), pLimit(CONCURRENCY)];
  let done = 0;
  const one = async (i: number) => {
    const id = await (i % 2 ? deleted(user) : finished(user));
    if (++done % 2_000 === 0) progress(`history: ${fmt.int(had + done / 2)} of ${fmt.int(had + n)} of each built`);
    return id;
  };
  const ids = await Promise.all(Array.from({ length: 2 * n }, (_, i) => limit(() => one(i))));
  const ms = performance.now() - t0;
  const { conversations } = hosted().stores;
  const got = await Promise.all(ids.map((id) => limit(() => conversations.get(user, id))));
  const right = (i: number) => (i % 2 ? got[i] === undefined : got[i]?.state === 'finished' && !got[i]?.in_memory);
  const wrong = ids.flatMap((id, i) => (right(i) ? [] : [`${id}: ${got[i]?.state}`]));
  if (wrong.length) throw new Error(`entries not as built: ${wrong.slice(0, 5).join(', ')}`);
  return ms;
}

/** In the builder: `n` conversations of `user`, each started, then passivated. */
export async function plain(user: string, n: number): Promise<void> {
  const { host } = hosted().tether;
  const limit = pLimit(CONCURRENCY);
  const one = async () => {
    const { conversation_id: id } = await host.commands.create(user, CreateConversationBody.parse({}));
    await reaches(id, user, 'awaiting_user_input');
    await host.passivate(id, 'idle');
  };
  await Promise.all(Array.from({ length: n }, () => limit(one)));
}

/** In the measured node: the first list page of `user` (what `GET /api/conversations` reads), `times` times; ms each. */
export async function pages(user: string, times: number): Promise<number[]> {
  const { queries } = hosted().tether.host;
  const ms: number[] = [];
  for (let i = 0; i < times; i++) {
    const t0 = performance.now();
    const page = await queries.list(user, { limit: PAGE });
    ms.push(performance.now() - t0);
    if (page.items.length !== PAGE) throw new Error(`a page of ${user} held ${page.items.length} items`);
  }
  return ms;
}

/** In the measured node: `user`'s conversation, started and awaiting input. */
export async function open(user: string): Promise<void> {
  const { host } = hosted().tether;
  const { conversation_id: id } = await host.commands.create(user, CreateConversationBody.parse({}));
  const c: Conv = { id, last: -1, wake: () => {} };
  const idle = ({ event: e }: LoggedEvent) => {
    if (e.type !== 'agent_state_changed' || e.data.state !== 'awaiting_user_input') return;
    c.last = e.id;
    c.wake();
  };
  await host.feed.listen(id, 0, { event: idle }).caughtUp;
  await until(`start-up of ${id}`, async () => (c.last >= 0 ? true : undefined), 60_000, 5);
  hosted().convs.set(user, c);
}

/**
 * In the measured node: `rounds` rounds on `user`'s conversation (a user `!cat file-N`; the agent runs it,
 * summarises it, awaits input); ms until the last answer, and until no index read is under way.
 */
export async function steps(user: string, rounds: number) {
  const c = hosted().convs.get(user)!;
  const [t0, done0, ms0] = [performance.now(), reads.done, reads.ms];
  for (let i = 0; i < rounds; i++) {
    const before = c.last;
    const answered = new Promise<void>((resolve) => (c.wake = () => c.last > before && resolve()));
    await hosted().tether.host.commands.act(c.id, user, { type: 'message', content: `!cat file-${sent++}` });
    await answered;
  }
  const answeredMs = performance.now() - t0;
  await until('index reads', async () => (reads.running === 0 ? true : undefined), LONG, 1);
  return { rounds, answeredMs, ms: performance.now() - t0, reads: reads.done - done0, readMs: reads.ms - ms0 };
}

type Side = Awaited<ReturnType<typeof steps>>;
const rate = (s: Side) => (2 * s.rounds * 1000) / s.ms;
const said = (s: Side) =>
  `${fmt.ms(rate(s))} steps/s (${fmt.int(s.ms)} ms, the last answer at ${fmt.int(s.answeredMs)} ms; ` +
  `${fmt.int(s.reads)} index reads of ${fmt.ms(s.readMs / Math.max(1, s.reads))} ms)`;

/** Keys under the user's prefix in the conversation bucket (entries, and any delete markers). */
async function keys(nc: NatsConnection, tag: string, user: string): Promise<number> {
  const bucket = storeNames(tag).conversationBucket;
  const filter = `$KV.${bucket}.u.${Buffer.from(user).toString('base64url')}.>`;
  const info = await (await jetstreamManager(nc)).streams.info(`KV_${bucket}`, { subjects_filter: filter });
  return Object.keys(info.state.subjects ?? {}).length;
}

/** (p3, p4): the history user's first list page against that of a user with exactly one page; medians of `PAGE_READS`, alternating. */
async function measurePages(node: Proc, id: 'p3' | 'p4', size: number, fewer: string): Promise<Row> {
  const got = { [KEPT]: [] as number[], [PAGED]: [] as number[] };
  for (let i = 0; i < 4; i++)
    for (const user of i % 2 ? [KEPT, PAGED] : [PAGED, KEPT])
      got[user]!.push(...(await node.call(HERE, pages, [user, PAGE_READS / 4], LONG)));
  const [kept, paged] = [median(got[KEPT]!), median(got[PAGED])];
  return {
    id,
    what: `list page: the first page of ${PAGE} (\`GET /api/conversations\`'s read: entries and each one's last seq) of the user with ${fmt.int(size)} finished and ${fmt.int(size)} deleted conversations${fewer}, vs that of a user with exactly ${PAGE}, same node, median of ${PAGE_READS} each`,
    tether: { value: kept, text: `${fmt.ms(kept)} ms` },
    baseline: { value: paged, text: `${fmt.ms(paged)} ms` },
    ...(id === 'p3' && { target: { op: '≤', value: 1.5 } as const }),
  };
}

async function measure(ctx: Ctx, node: Proc, id: 'p' | 'p2', size: number): Promise<Row> {
  const rounds = ctx.quick ? QUICK_ROUNDS : ROUNDS;
  const step = (user: string) => timed(() => node.call(HERE, steps, [user, rounds], LONG));
  // (p2) follows (p) in the same, warm node; its history side is the slow one.
  const r = reps(ctx, { warmups: 0, runs: 3 }, id === 'p' ? { warmups: 1, runs: 5 } : { warmups: 0, runs: 3 });
  const runs = await repeat(ctx, `(${id})`, r, async (i) => {
    const got = new Map<string, Awaited<ReturnType<typeof step>>>();
    // Back to back, the order turning every run: noise reaches both.
    for (const user of i % 2 ? [KEPT, NONE] : [NONE, KEPT]) got.set(user, await step(user));
    const [kept, none] = [got.get(KEPT)!, got.get(NONE)!];
    const summary = `history ${said(kept.value)}; none ${said(none.value)}`;
    return { kept: rate(kept.value), none: rate(none.value), use: [kept, none], summary };
  });
  const [kept, none] = [median(runs.map((x) => x.kept)), median(runs.map((x) => x.none))];
  const fewer = ctx.quick && id === 'p2' ? ' (--quick: the full run has 10,000 of each)' : '';
  return {
    id,
    what: `history: agent steps/s of one conversation (scripted agent, ${rounds} rounds of a command: run, then summarise; until the last answer and no index read under way) whose user has ${fmt.int(size)} finished and ${fmt.int(size)} deleted conversations${fewer}, vs one of a user with none, same node of a one-node cluster (median)`,
    tether: { value: kept, text: `${fmt.ms(kept)} steps/s` },
    baseline: { value: none, text: `${fmt.ms(none)} steps/s` },
    ...(id === 'p' && { target: { op: '≥', value: 0.9 } as const }),
  };
}

export const history: Scenario = {
  name: 'history',
  setup: `two Tethers in processes of their own on one run's JetStream log and KV stores (scripted agent, in-memory runtime: each command prints 16 lines of 64 characters). The measured one is the node of a one-node cluster (lease ${fmt.int(LEASE_MS)} ms), as \`tether serve\` on NATS always runs: each start of running reads the user's index for the per-user cap. The other, solo (no such reads), builds the history user's conversations ${CONCURRENCY} at a time: 1,000 finished (each answered a message, ran a command the user paused, was resumed with nothing to answer and finished, then was passivated) and 1,000 deleted (created, started, then \`commands.delete\`, as \`DELETE /api/conversations/:id\` does), then 9,000 more of each for (p2).`,
  load: `a run is ${ROUNDS} rounds (${2 * ROUNDS} agent steps) on the history user's conversation and ${ROUNDS} on the baseline user's, back to back, the order turning every run, driven inside the measured node through \`commands.act\`; each side timed from its first message until its last answer and no read of the index under way (the cap's reads run beside the steps, unawaited; every read of \`list\` or \`running\` of the conversation store is counted and timed). (p): 1 warm-up + 5 runs; (p2), in the same warm node: 3 runs; medians.`,
  baseline: `(p, p2) the same rounds on the conversation of another user who has no other, in the same node and the same runs; it is also measured once before any history is built and once after (p2). (p3, p4) the first list page of a user with exactly ${PAGE} conversations (started, then passivated), read alternately with the history user's.`,
  checks:
    "every round ends with a new `awaiting_user_input` fact; after each build every finished conversation's entry says `finished` and out of memory, and every deleted one has none; runs with other processes over 20% of a core are run again.",
  quick: `${QUICK_ROUNDS} rounds a side; (p2, p4) with 2,000 finished and 2,000 deleted; no warm-up, 3 runs.`,
  async run(ctx) {
    const tag = ctx.tag('p');
    const [node, builder] = [new Proc('host'), new Proc('builder')];
    const rounds = ctx.quick ? QUICK_ROUNDS : ROUNDS;
    const once = async (user: string) => said(await node.call(HERE, steps, [user, rounds], LONG));
    try {
      for (const p of [node, builder]) {
        track(p.name, p.pid);
        await p.call(HERE, start, [ctx.natsUrl, tag, p === node]);
      }
      for (const user of [NONE, KEPT]) await node.call(HERE, open, [user]);
      await builder.call(HERE, plain, [PAGED, PAGE], LONG);
      await once(NONE);
      ctx.note(`Before any history: baseline user ${await once(NONE)}; history user ${await once(KEPT)}.`);
      const rows: Row[] = [];
      let had = 0;
      for (const [id, size] of [['p', 1_000] as const, ['p2', ctx.quick ? 2_000 : 10_000] as const]) {
        progress(`history: building ${fmt.int(size - had)} finished and as many deleted conversations`);
        const ms = await builder.call(HERE, grow, [KEPT, size - had, had], LONG);
        const count = fmt.int(await keys(ctx.nc, tag, KEPT));
        ctx.note(
          `(${id}): ${fmt.int(size - had)} of each built in ${fmt.int(ms / 1000)} s; ${count} keys under the user.`,
        );
        had = size;
        rows.push(await measure(ctx, node, id, size));
        const fewer = ctx.quick && id === 'p2' ? ' (--quick: 10,000 in the full run)' : '';
        rows.push(await measurePages(node, id === 'p' ? 'p3' : 'p4', size, fewer));
      }
      ctx.note(`After (p2): baseline user ${await once(NONE)}.`);
      return rows;
    } finally {
      for (const p of [node, builder]) {
        await p.call(HERE, stop, []).catch(() => undefined);
        await p.stop();
        untrack(p.name);
      }
      await deleteStores(ctx.nc, tag);
      const jsm = await jetstreamManager(ctx.nc);
      for (const b of Object.values(clusterNames(tag))) await jsm.streams.delete(`KV_${b}`).catch(() => false);
    }
  },
};
