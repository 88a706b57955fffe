// (c, c2, c3, d) A passivated 10,000-event conversation back in memory: from its snapshot, through the
// host, by folding its whole log; against the raw JetStream reads they stand on and OpenHands' file
// layout. `built` and `compare` serve (b) too.
import { performance } from 'node:perf_hooks';
import { CreateConversationBody } from '../../protocol/index.ts';
import { readStoredState } from '../../src/conversation/index.ts';
import { memorySnapshotStore, subjectFor } from '../../src/store/index.ts';
import { fileLayoutNote, readFileLayout, writeFileLayout, type FileLayout } from '../baselines/fileLayout.ts';
import { rawSnapshotRead } from '../baselines/rawJetStream.ts';
import { messageText } from '../harness/fleet.ts';
import { hosted, restEvents, storeNames, TetherHost } from '../harness/host.ts';
import { fmt, median, timed, until } from '../harness/measure.ts';
import { msFigure, repeat, reps, type Ctx, type Reps, type Row, type Scenario } from '../harness/scenario.ts';
import { countedRead, readLog } from './read.ts';

const USER = 'rehydrate-user';

/** In the host: a conversation of `user` chatted a round at a time (message, running, reply, awaiting), passivated at `events` events. */
export async function chat(user: string, events: number) {
  const { tether, stores } = hosted();
  const t0 = performance.now();
  const body = CreateConversationBody.parse({ max_iterations: 10_000 });
  const { conversation_id: id } = await tether.host.commands.create(user, body);
  let idle = -1;
  let wake: (id: number) => void = () => {};
  const feed = tether.host.feed.listen(id, 0, {
    event: ({ event: e }) =>
      e.type === 'agent_state_changed' && e.data.state === 'awaiting_user_input' && wake((idle = e.id)),
  });
  await until(`${id} start-up`, async () => (idle >= 0 ? idle : undefined), 60_000, 5);
  for (let r = 0, rounds = Math.floor((events - idle - 3) / 4); r < rounds; r++) {
    const before = idle;
    const answered = new Promise<void>((resolve) => (wake = () => idle > before && resolve()));
    await tether.host.commands.act(id, user, { type: 'message', content: messageText(0, r) });
    await answered;
  }
  feed.stop();
  await tether.host.passivate(id, 'close_delay');
  const [last, snapshot] = await Promise.all([stores.log.last(id), stores.snapshots.get(id)]);
  if (last?.event.type !== 'session_passivated' || snapshot?.seq !== last.seq || tether.host.isLive(id))
    throw new Error(`${id} did not end passivated with its snapshot at its last seq`);
  return { id, events: last.event.id + 1, ms: performance.now() - t0 };
}

export const built = (ctx: Ctx, host: TetherHost, user: string) =>
  host.proc.call(import.meta.url, chat, [user, ctx.quick ? 2_000 : 10_000]);

/** In the host: one load of `id`, timed there and checked. */
export async function load(kind: 'snapshot' | 'fold' | 'session', id: string, events: number) {
  const { tether, stores } = hosted();
  const snapshots = kind === 'fold' ? memorySnapshotStore() : stores.snapshots;
  const t0 = performance.now();
  if (kind === 'session') {
    await tether.host.session(id, USER);
    const ms = performance.now() - t0;
    const last = await stores.log.last(id);
    await tether.host.passivate(id, 'close_delay');
    if (last?.event.type !== 'session_rehydrated' || last.event.data.from !== 'snapshot' || tether.host.isLive(id))
      throw new Error(`host.session() did not rehydrate ${id} from its snapshot (${last?.event.type})`);
    return [ms];
  }
  const got = await readStoredState(stores.log, snapshots, id);
  const ms = performance.now() - t0;
  const [from, folded] = kind === 'fold' ? ['log', events] : ['snapshot', 0];
  if (got?.from !== from || got.folded !== folded || got.state.nextEventId !== events)
    throw new Error(`${kind} load: from ${got?.from}, ${got?.folded} folded, next id ${got?.state.nextEventId}`);
  return [ms];
}

const orders = (n: number): number[][] =>
  n === 1 ? [[0]] : orders(n - 1).flatMap((o) => [...o, 0].map((_, k) => o.toSpliced(n - 1 - k, 0, n - 1)));

/** Rounds of each side once (its own ms), the order turning every round through all orders (`orders`, the natural first); each side's median. */
export async function compare<K extends string>(ctx: Ctx, id: string, r: Reps, by: Record<K, () => Promise<number>>) {
  const names = Object.keys(by) as K[];
  const order = orders(names.length);
  const runs = await repeat(ctx, id, r, async (i) => {
    const ms = {} as Record<K, number>;
    const t = await timed(async () => {
      for (const k of order[i % order.length]!) ms[names[k]!] = await by[names[k]!]();
    });
    return { ms, use: [t], summary: names.map((n) => `${n} ${fmt.ms(ms[n])} ms`).join(', ') };
  });
  const figure = (n: K) => msFigure(median(runs.map((x) => x.ms[n])));
  return Object.fromEntries(names.map((n) => [n, figure(n)])) as Record<K, ReturnType<typeof figure>>;
}

const WHAT = (n: string): Record<string, string> => ({
  c: `rehydrate from snapshot: \`readStoredState\` of a passivated ${n}-event conversation vs raw KV get of the snapshot + last-message direct get`,
  c2: 'rehydrate through `host.session()` (ownership check, snapshot load, actor started, `session_rehydrated` stored) vs the same raw reads',
  c3: `rehydrate from snapshot (c) vs reading the ${n} events back from OpenHands' file layout (a JSON file per event + 25-event pages, page cache warm; (d)'s rounds)`,
  d: `rehydrate by full fold: \`readStoredState\` with no snapshot (read + fold of ${n} events) vs raw ordered consumer read (pulls bounded to 8 MiB) + JSON.parse`,
});

export const rehydrate: Scenario = {
  name: 'rehydrate',
  setup:
    "a Tether host (createTether() in its own process: JetStream log, KV stores, scripted agent, in-memory runtime, default limits, so periodic snapshots too); one conversation of 10,000 events written through it a chat round at a time (start-up, then user message, `running`, agent reply, `awaiting_user_input`), then passivated (runtime stopped, `session_passivated`, snapshot in KV); its events' JSON (from REST) written into OpenHands' file layout in a temporary directory as `EventStream.add_event` does: `sessions/<id>/events/<n>.json` per event and, after every 25th, `event_cache/<start>-<end>.json` holding those 25.",
  load: "(c) `readStoredState(log, snapshots, id)` from the passivation's snapshot; (d) `readStoredState` with an empty snapshot store: the whole log read and folded; (c2) `host.session(id, user)` until it resolves with the live session (ownership check, snapshot load, actor started, `session_rehydrated` stored), passivated again after each run, untimed. Each timed in the host process. Rounds run each side once, the order turning every round through all orders: (c) 3 warm-up + 21, (d) 2 + 9, (c2) 1 + 9, in that order; medians. (c3) sets (c) against the file-layout reads of (d)'s rounds.",
  baseline:
    "in the bench process, as another program on its own connection: (c, c2) the reads a snapshot load cannot avoid: KV get of the snapshot (JSON.parse), then a direct get of the subject's last message; (d) `rawRead` as in (b); (c3) the events read back as OpenHands' `EventStore` does from id 0: `readdir` of events/ for the next id, then per id its 25-event page (one read + JSON.parse per page) or, with no page, its own file, synchronous reads one at a time, page cache warm.",
  checks:
    "the conversation ends passivated with its snapshot at its last seq; (c) loads from the snapshot with nothing to fold and next event id 10,000; (d) folds all 10,000 events from the log; (c2) the last stored event is `session_rehydrated` from `snapshot`, and the session is out of memory after passivation; the raw reads find the snapshot at the last message's seq and 10,000 messages; the file layout gives back every event in id order.",
  quick: 'a 2,000-event conversation; (c) 1 warm-up + 5 rounds, (d) and (c2) 0 + 3.',
  async run(ctx) {
    const host = await TetherHost.start(ctx, { tag: ctx.tag('c') });
    let files: FileLayout | undefined;
    try {
      const c = await built(ctx, host, USER);
      const { stream, subjectPrefix, snapshotBucket } = storeNames(host.options.tag);
      const subject = subjectFor(subjectPrefix, c.id);
      const r = reps(ctx, { warmups: 0, runs: 3 }, { warmups: 2, runs: 9 });
      ctx.note(`Built through the host in ${fmt.ms(c.ms / 1000)} s (${fmt.int((c.events / c.ms) * 1000)} events/s).`);
      const json = (await restEvents(host.base, USER, c.id, 0)).map((i) => JSON.stringify(i.event));
      const layout = (files = await writeFileLayout(c.id, json));
      const call = (kind: Parameters<typeof load>[0]) => host.proc.call(import.meta.url, load, [kind, c.id, c.events]);
      const tether = (kind: Parameters<typeof load>[0]) => async () => (await call(kind))[0]!;
      const raw = () => rawSnapshotRead(ctx.nc, snapshotBucket, stream, subject, c.id);
      const rc = reps(ctx, { warmups: 1, runs: 5 }, { warmups: 3, runs: 21 });
      const snap = await compare(ctx, '(c)', rc, { Tether: tether('snapshot'), raw });
      const fold = await compare(ctx, '(d)', r, {
        Tether: tether('fold'),
        raw: countedRead(ctx, stream, subject, c.events),
        files: async () => readFileLayout(layout).ms,
      });
      const split: number[][] = [];
      for (let i = 0; i < r.runs; i++) split.push(await readLog(host, c.id, c.events, true));
      const [readMs, foldMs] = [0, 1].map((k) => median(split.map((s) => s[k]!))) as [number, number];
      ctx.note(
        `(d) split, timed apart (median of ${r.runs}): \`log.read\` ${fmt.ms(readMs)} ms, \`foldEvents\` ${fmt.ms(foldMs)} ms (${fmt.int((foldMs * 1000) / c.events)} µs per event).`,
      );
      ctx.note(fileLayoutNote(layout, r.runs));
      const session = await compare(ctx, '(c2)', reps(ctx, r, { warmups: 1, runs: 9 }), {
        Tether: tether('session'),
        raw,
      });
      const rows: Array<[string, Row['tether'], Row['baseline'], Row['target']?]> = [
        ['c', snap.Tether, snap.raw, { op: '<', value: 20, of: 'tether', say: 'ms' }],
        ['c2', session.Tether, session.raw],
        ['c3', snap.Tether, fold.files],
        ['d', fold.Tether, fold.raw, { op: '≤', value: 2 }],
      ];
      const what = WHAT(fmt.int(c.events));
      return rows.map(([id, tether, baseline, target]) => ({ id, what: what[id]!, tether, baseline, target }));
    } finally {
      await files?.remove();
      await host.stop(ctx.nc);
    }
  },
};
