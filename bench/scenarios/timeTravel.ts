// (m, m2, n to n3) Time travel and fork; the functions above `timeTravel` run in the host process.
import { randomInt, randomUUID } from 'node:crypto';
import { CreateConversationBody, type LoggedEvent } from '../../protocol/index.ts';
import { scriptedAgent } from '../../src/agent/index.ts';
import { type NodeHost } from '../../src/host/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryCheckpointStore } from '../../src/store/index.ts';
import { createTether } from '../../src/tether.ts';
import { hosted, TetherHost } from '../harness/host.ts';
import { fmt, median, percentile, timed } from '../harness/measure.ts';
import { msFigure, repeat, reps, type Row, type Scenario } from '../harness/scenario.ts';

const USER = 'timetravel-user';
const BODY = CreateConversationBody.parse({ max_iterations: 10_000 });
const inTurn = async <A, B>(i: number, a: () => Promise<A>, b: () => Promise<B>): Promise<[A, B]> =>
  i % 2 ? b().then(async (y) => [await a(), y]) : a().then(async (x) => [x, await b()]);

let f: { id: string; events: LoggedEvent[]; unchecked: NodeHost }; // `unchecked`: an empty checkpoint store
const owner = () => hosted().tether.host;
const pick = () => f.events[randomInt(f.events.length)]!.seq;
const stateAt = (h: NodeHost, at: number) =>
  h.queries.stateAt(f.id, USER, at).then((s) => (s.seq === at ? s : Promise.reject(new Error(`seq ${s.seq} ≠ ${at}`))));
const isIdle = (e: LoggedEvent['event']) => e.type === 'agent_state_changed' && e.data.state === 'awaiting_user_input';

/** Chats one round (message, running, reply, idle) at a time until passivation makes it `events` long. */
async function chat(o: NodeHost, events: number): Promise<string> {
  const { conversation_id: id } = await o.commands.create(USER, BODY);
  const idle: number[] = []; // ids of the idle facts
  let wake: (x?: unknown) => void = () => {};
  const listening = o.feed.listen(id, 0, { event: ({ event: e }) => void (isIdle(e) && wake(idle.push(e.id))) });
  const turn = async (n: number): Promise<unknown> =>
    idle.length < n && new Promise((r) => (wake = r)).then(() => turn(n));
  await turn(1);
  for (let k = 1; k <= Math.floor((events - idle[0]! - 3) / 4); k++) {
    await o.commands.act(id, USER, { type: 'message', content: `message ${k} `.padEnd(120, '.') });
    await turn(k + 1);
  }
  listening.stop();
  return o.passivate(id, 'close_delay').then(() => id); // stores 2 events
}

export async function build(events: number, checked: number) {
  const { stores } = hosted();
  const t = await timed(() => chat(owner(), events));
  const { items } = await stores.log.read(t.value);
  const stub = { runtimes: memoryRuntimeProvider(), agent: scriptedAgent() };
  const unchecked = createTether({ ...stub, stores: { ...stores, checkpoints: memoryCheckpointStore() } }).host;
  f = { id: t.value, events: items, unchecked };
  let written = 0;
  for (let c = await stores.checkpoints.before(f.id, items.at(-1)!.seq + 1); c; written++)
    c = await stores.checkpoints.before(f.id, c.seq);
  if (items.at(-1)?.event.type !== 'session_passivated' || written < Math.floor(items.length / 100) - 1)
    throw new Error(`the conversation does not end passivated, or its owner wrote only ${written} checkpoints`);
  for (let i = 0, seq = pick(); i < checked; i++, seq = pick())
    if (JSON.stringify(await stateAt(owner(), seq)) !== JSON.stringify(await stateAt(unchecked, seq)))
      throw new Error(`seq ${seq}: the fold from a checkpoint differs from the fold from the creation`);
  const note = `The conversation (${fmt.int(items.length)} events) was written in ${fmt.ms(t.ms / 1000)} s; its owner wrote ${written} checkpoints.`;
  return { events: items.length, note };
}

/** One full fold (of the last event, on the manager without checkpoints) and `seeks` seeks at random seqs. */
export async function seekRound(i: number, seeks: number) {
  const seekMs: number[] = [];
  const fold = () => timed(() => stateAt(f.unchecked, f.events.at(-1)!.seq));
  const [{ ms }] = await inTurn(i, fold, async () => {
    for (let k = 0; k < seeks; k++) seekMs.push((await timed(() => stateAt(owner(), pick()))).ms);
  });
  const summary = `full fold ${fmt.ms(ms)} ms; ${seeks} seeks p50 ${fmt.ms(median(seekMs))} ms, max ${fmt.ms(Math.max(...seekMs))} ms`;
  return { foldMs: ms, seekMs, summary };
}

/** One fork at the `n`th event (checked, deleted) and one sequential append of those events (checked, purged). */
export async function forkRound(i: number, n: number) {
  const { log } = hosted().stores;
  const at = f.events[n - 1]!;
  const fork = async () => {
    const t = await timed(() => owner().commands.fork(f.id, USER, at.seq));
    const id = t.value.conversation_id;
    const { items } = await log.read(id, { limit: n + 1 });
    const e = items[n - 1]?.event;
    if (e?.id !== at.event.id || e.conversation_id !== id || items[n]?.event.type !== 'conversation_forked')
      throw new Error(`fork ${id}: not the parent's ${n} events then conversation_forked`);
    await owner().commands.delete(id, USER);
    return t.ms;
  };
  const append = async () => {
    const id = randomUUID().replaceAll('-', '');
    const copy = (p: Promise<number>, { event }: LoggedEvent) =>
      p.then(async (seq) => (await log.append({ ...event, conversation_id: id }, { expectedLastSeq: seq })).seq);
    const t = await timed(() => f.events.slice(0, n).reduce(copy, Promise.resolve(0)));
    const { items } = await log.read(id);
    if (items.length !== n || items.at(-1)?.seq !== t.value) throw new Error(`${id}: ${items.length} of ${n} appended`);
    await log.purge(id);
    return t.ms;
  };
  const [forkMs, appendMs] = await inTurn(i, fork, append);
  return { forkMs, appendMs, summary: `fork ${fmt.ms(forkMs)} ms; append ${fmt.ms(appendMs)} ms` };
}

export const timeTravel: Scenario = {
  name: 'timetravel',
  setup:
    'a Tether host (createTether() in its own process: JetStream log, KV stores and checkpoint bucket, scripted agent, in-memory runtime, default limits: a checkpoint each time the event count passes a multiple of 100); in it, one conversation of 10,000 events written through its NodeHost one chat round (message, running, reply, idle) at a time, then passivated; beside it a second manager (createTether) on the same stores with an empty in-memory checkpoint store.',
  load: "(m, m2) rounds of one full fold and 20 seeks (the owner's `stateAt` at a seq drawn uniformly from the events), the fold first in every other round; 2 warm-up + 10 rounds; p50 and nearest-rank p99 of all seeks. (n, n2, n3) rounds of one `manager.fork` at the last event of a 100-, 1,000- and 10,000-event prefix and one sequential append of the same events, the fork first in every other round; 2 warm-up + 7 rounds (10,000: 1 + 3); medians. All timed in the host process.",
  baseline:
    "(m, m2) the median of the rounds' full folds: the second manager's `stateAt` of the last event (every event read and folded). (n to n3) the prefix's events appended under a fresh conversation id with `log.append`, each expecting the one before (the floor of a sequential copy).",
  checks:
    'the conversation ends passivated and its owner wrote a checkpoint per 100 events (the last may be on its way); 5 seeks equal the fold from the creation at the same seq; every `stateAt` answers the state at the seq asked; each fork holds copies of the prefix then `conversation_forked` (then is deleted); each append copy holds every event (then is purged).',
  quick: '1,000 events, prefixes of 100, 500, 1,000; 5 rounds of 10 seeks, 3 checked; 3 fork rounds; no warm-ups.',
  async run(ctx) {
    const host = await TetherHost.start(ctx, { tag: ctx.tag('m') });
    const call = <A extends unknown[], R>(fn: (...a: A) => Promise<R>, ...args: A) =>
      timed(() => host.proc.call(import.meta.url, fn, args)).then((t) => ({ ...t.value, use: [t] }));
    const b = await call(build, ctx.quick ? 1_000 : 10_000, ctx.quick ? 3 : 5);
    ctx.note(b.note);
    const r = reps(ctx, { warmups: 0, runs: 5 }, { warmups: 2, runs: 10 });
    const seeks = await repeat(ctx, '(m) seeks', r, (i) => call(seekRound, i, ctx.quick ? 10 : 20));
    const all = seeks.flatMap((x) => x.seekMs);
    const rows: Row[] = [50, 99].map((p) => ({
      id: p === 50 ? 'm' : 'm2',
      what: `seek p${p}: \`manager.stateAt\` at ${all.length} random seqs of a ${fmt.int(b.events)}-event conversation, folded from the nearest checkpoint, vs the p50 of full folds`,
      tether: msFigure(percentile(all, p), ` (p${p})`),
      baseline: msFigure(median(seeks.map((x) => x.foldMs)), ` (full fold p50 of ${seeks.length})`),
      target: { op: '≤', value: 0.1 },
    }));
    for (const [k, n] of [100, ctx.quick ? 500 : 1_000, b.events].entries()) {
      const r = reps(ctx, { warmups: 0, runs: 3 }, n > 1_000 ? { warmups: 1, runs: 3 } : { warmups: 2, runs: 7 });
      const runs = await repeat(ctx, `fork of ${fmt.int(n)} events`, r, (i) => call(forkRound, i, n));
      const perK = (ms: number) => msFigure(ms, ` (${fmt.ms((ms / n) * 1000)} ms per 1,000 events)`);
      rows.push({
        id: `n${k ? k + 1 : ''}`,
        what: `fork of a ${fmt.int(n)}-event prefix: \`manager.fork\` until it returns, median of ${runs.length}, vs appending its events one by one, each expecting the one before, median`,
        tether: perK(median(runs.map((x) => x.forkMs))),
        baseline: perK(median(runs.map((x) => x.appendMs))),
      });
    }
    await host.stop(ctx.nc);
    return rows;
  },
};
