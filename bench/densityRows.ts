// Rows (g): density. N conversations with one ws connection each, held by a
// real Tether server, with their sessions live and then hibernated, against
// a bare `ws` server holding N idle connections. Each server runs in a node
// process of its own (--expose-gc), the clients in a third.
import { performance } from 'node:perf_hooks';
import type { BenchContext, Measured } from './benchContext.ts';
import type { BareWsCommand, BareWsReply, ServerMemory } from './bareWsServer.ts';
import type { ClientsCommand, ClientsReply, ClientsStatus } from './densityClients.ts';
import { USER_PARAM, type Created, type DensityCommand, type DensityReply, type TetherMemory } from './densityServer.ts';
import { OWN_NAME_NOTE, perThing, type HeapKind } from './densitySnapshot.ts';
import { BenchChild, HEAP_NODE_FLAGS, PLAIN_NODE_FLAGS, benchUser } from './heapBench.ts';
import { fmt, progress } from './measure.ts';
import type { Row } from './report.ts';

const CONNECTIONS = 10_000;
const QUICK_CONNECTIONS = 2_000;
/** Connections opened and closed (and, on Tether, conversations created, hibernated, woken and deleted) before the empty reading, so that the code they run is compiled and loaded in both empty figures. */
const WARM_UP = 20;
/** Hibernated conversations whose clients send a message afterwards, to show that their connections still work. */
const SAMPLE = 20;
/** Target: a hibernated connection costs at most this many times the heap of a bare ws connection. */
const TARGET = 2;

const kb = (bytes: number) => `${(bytes / 1024).toFixed(2)} KiB`;
const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

interface BareRun {
  empty: ServerMemory;
  full: ServerMemory;
  connectMs: number;
  /** Per connection, by kind of object: only when asked for heap snapshots. */
  kinds?: HeapKind[];
}

interface TetherRun {
  empty: TetherMemory;
  live: TetherMemory;
  hibernated: TetherMemory;
  created: Created;
  connectMs: number;
  passivateMs: number;
  status: ClientsStatus;
  checkMs: number;
  liveAfterCheck: number;
  kinds?: HeapKind[];
}

type Clients = BenchChild<ClientsCommand, ClientsReply>;

function expect(what: string, got: number, want: number): void {
  if (got !== want) throw new Error(`density: ${what} is ${got}, expected ${want}`);
}

/** The bare ws baseline: warm-up connections opened and closed, empty reading, n idle connections, reading. */
async function bareRun(ctx: BenchContext, clients: Clients, n: number, snapshots: boolean): Promise<BareRun> {
  const server = new BenchChild<BareWsCommand, BareWsReply>(new URL('./bareWsServer.ts', import.meta.url), 'the bare ws server', HEAP_NODE_FLAGS);
  const ask = <R extends BareWsReply>(command: BareWsCommand) => server.ask(command, ctx.stepTimeoutMs) as Promise<R>;
  const connect = (urls: string[]) => clients.ask({ type: 'connect', urls, sync: false }, ctx.stepTimeoutMs) as Promise<{ ms: number }>;
  try {
    const { port } = await ask<{ port: number }>({ type: 'start' });
    const url = `ws://127.0.0.1:${port}/`;
    await connect(Array.from({ length: WARM_UP }, () => url));
    await clients.ask({ type: 'close' }, ctx.stepTimeoutMs);
    const empty = await ask<ServerMemory>({ type: 'measure' });
    expect('connections of the empty bare ws server', empty.connections, 0);
    const before = snapshots ? await ask<HeapKind[]>({ type: 'heapByKind' }) : undefined;
    const { ms: connectMs } = await connect(Array.from({ length: n }, () => url));
    const full = await ask<ServerMemory>({ type: 'measure' });
    expect('connections the bare ws server holds', full.connections, n);
    const kinds = before && perThing(before, await ask<HeapKind[]>({ type: 'heapByKind' }), n);
    await clients.ask({ type: 'close' }, ctx.stepTimeoutMs);
    await ask({ type: 'close' });
    return { empty, full, connectMs, kinds };
  } finally {
    server.stop();
  }
}

/**
 * Tether: warm-up, empty reading; n conversations created and started, one
 * client each (connected on `sync`), reading with live sessions; every session
 * passivated, reading; then a sample of clients sends a message each.
 */
async function tetherRun(ctx: BenchContext, clients: Clients, n: number, tag: string, snapshots: boolean): Promise<TetherRun> {
  const server = new BenchChild<DensityCommand, DensityReply>(new URL('./densityServer.ts', import.meta.url), 'the density server', HEAP_NODE_FLAGS);
  // Creating and hibernating 10,000 conversations on JetStream takes a while on a small machine: generous bounds.
  const bound = 5 * ctx.stepTimeoutMs;
  const ask = <R extends DensityReply>(command: DensityCommand) => server.ask(command, bound) as Promise<R>;
  const measure = () => ask<TetherMemory>({ type: 'measure' });
  try {
    const { port } = await ask<{ port: number }>({ type: 'start', natsUrl: ctx.natsUrl, tag });
    const urls = (c: Created, first: number) =>
      c.ids.map((id, i) => `ws://127.0.0.1:${port}/ws?conversation_id=${id}&after_seq=${c.cursors[i]}&${USER_PARAM}=${benchUser(first + i)}`);
    const connect = (c: Created, first: number) => clients.ask({ type: 'connect', urls: urls(c, first), sync: true }, bound) as Promise<{ ms: number }>;
    const sample = (count: number) => Array.from({ length: count }, (_, k) => Math.floor((k * n) / count));

    // Warm-up on conversations of their own (users after the measured ones), deleted before the empty reading.
    const warm = await ask<Created>({ type: 'create', count: WARM_UP, first: n });
    await connect(warm, n);
    await ask({ type: 'passivate', ids: warm.ids });
    await clients.ask({ type: 'check', indexes: warm.ids.map((_, i) => i), timeoutMs: ctx.stepTimeoutMs }, bound);
    await clients.ask({ type: 'close' }, bound);
    await ask({ type: 'delete', ids: warm.ids, first: n });

    const empty = await measure();
    expect('connections of the empty Tether server', empty.connections, 0);
    expect('sessions in memory in the empty Tether server', empty.liveCount, 0);
    const before = snapshots ? await ask<HeapKind[]>({ type: 'heapByKind' }) : undefined;
    progress(`density: creating ${fmt.int(n)} conversations, then one ws client each`);
    const created = await ask<Created>({ type: 'create', count: n, first: 0 });
    const { ms: connectMs } = await connect(created, 0);
    const live = await measure();
    expect('connections the Tether server holds (live sessions)', live.connections, n);
    expect('sessions in memory (live)', live.liveCount, n);
    progress(`density: hibernating the ${fmt.int(n)} sessions, connections open`);
    const { ms: passivateMs } = await ask<{ ms: number }>({ type: 'passivate', ids: created.ids });
    const hibernated = await measure();
    expect('connections the Tether server holds (hibernated sessions)', hibernated.connections, n);
    expect('sessions in memory (hibernated)', hibernated.liveCount, 0);
    const kinds = before && perThing(before, await ask<HeapKind[]>({ type: 'heapByKind' }), n);
    const status = (await clients.ask({ type: 'status' }, bound)) as ClientsStatus;
    expect('open client sockets after hibernation', status.open, n);
    expect('client sockets lost after hibernation', status.lost, 0);
    expect('clients told that their session hibernated', status.sawPassivation, n);
    const indexes = sample(Math.min(SAMPLE, n));
    const { ms: checkMs } = (await clients.ask({ type: 'check', indexes, timeoutMs: ctx.stepTimeoutMs }, bound)) as { ms: number };
    const liveAfterCheck = (await measure()).liveCount;
    expect('sessions in memory after the sample woke theirs', liveAfterCheck, indexes.length);
    await clients.ask({ type: 'close' }, bound);
    await ask({ type: 'close' });
    return { empty, live, hibernated, created, connectMs, passivateMs, status, checkMs, liveAfterCheck, kinds };
  } finally {
    server.stop();
  }
}

const perConnection = (from: number, to: number, n: number) => (to - from) / n;

/** The heaviest kinds, as `kind ×count size` in one line. */
function kindLine(kinds: readonly HeapKind[], top: number): string {
  return kinds
    .filter(([, , bytes]) => bytes > 0)
    .slice(0, top)
    .map(([kind, count, bytes]) => `\`${kind}\` ×${count.toFixed(count < 10 ? 2 : 1)} ${bytes.toFixed(0)} B`)
    .join(', ');
}

function breakdownNotes(n: number, tether: HeapKind[], bare: HeapKind[], bareHeap: number): string[] {
  const sum = (kinds: readonly HeapKind[]) => kinds.reduce((total, [, , bytes]) => total + bytes, 0);
  const beyond = perThing(bare, tether, 1);
  // Kinds that each connection has (those below one per connection are the server's own, counted by chance in the difference).
  const ownNames = beyond.filter(([kind, count]) => kind.includes('with own name') && count >= 0.5);
  const ownNameStores = sum(ownNames.filter(([kind]) => kind.startsWith('(object properties) of ')));
  const ownNameNote =
    ownNames.length === 0
      ? []
      : [
          `${OWN_NAME_NOTE} Per hibernated connection those stores hold ${kb(ownNameStores)} (${fmt.ratio(ownNameStores / bareHeap)}× a bare ws connection's heap), in: ${ownNames
            .filter(([kind]) => kind.startsWith('closure '))
            .map(([kind, count]) => `\`${kind}\` ×${count.toFixed(2)}`)
            .join(', ')}.`,
        ];
  return [
    `Heap snapshot breakdown (g2), from one extra run of each server with ${fmt.int(n)} connections (v8 heap snapshots before the connections and after, live objects only, growth ÷ connections, by constructor or kind; taken in extra runs because a snapshot grows the process's RSS): a hibernated Tether connection holds ${kb(sum(tether))} of objects, heaviest: ${kindLine(tether, 14)}.`,
    `A bare ws connection holds ${kb(sum(bare))}: ${kindLine(bare, 10)}.`,
    `What a hibernated Tether connection holds beyond a bare ws connection, heaviest kinds: ${kindLine(beyond, 14)}.`,
    ...ownNameNote,
  ];
}

export async function measureDensity(ctx: BenchContext, forceProfile: boolean): Promise<Measured> {
  const n = ctx.quick ? QUICK_CONNECTIONS : CONNECTIONS;
  progress(`density: ${fmt.int(n)} ws connections, a bare ws server, then Tether (sessions live, then hibernated)`);
  const clients: Clients = new BenchChild(new URL('./densityClients.ts', import.meta.url), 'the density clients', PLAIN_NODE_FLAGS);
  let bare: BareRun;
  let tether: TetherRun;
  let breakdown: string[] = [];
  const t0 = performance.now();
  const took = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
  try {
    bare = await bareRun(ctx, clients, n, false);
    progress(`density: bare ws measured (${took()})`);
    tether = await tetherRun(ctx, clients, n, `${ctx.runId}d`, false);
    progress(`density: Tether measured (${took()})`);
    const missed = perConnection(tether.empty.heapBytes, tether.hibernated.heapBytes, n) > TARGET * perConnection(bare.empty.heapBytes, bare.full.heapBytes, n);
    if (missed || forceProfile) {
      // Both extra runs at once, the bare one with clients of its own: they count objects, not time.
      progress('density: heap snapshots of a bare ws connection and a hibernated Tether connection (extra runs, side by side)');
      const moreClients: Clients = new BenchChild(new URL('./densityClients.ts', import.meta.url), 'the density clients (bare ws snapshots)', PLAIN_NODE_FLAGS);
      try {
        const [bareKinds, tetherKinds] = await Promise.all([
          bareRun(ctx, moreClients, n, true).then((r) => r.kinds!),
          tetherRun(ctx, clients, n, `${ctx.runId}p`, true).then((r) => r.kinds!),
        ]);
        breakdown = breakdownNotes(n, tetherKinds, bareKinds, perConnection(bare.empty.heapBytes, bare.full.heapBytes, n));
      } finally {
        moreClients.stop();
      }
      progress(`density: heap snapshots taken (${took()})`);
    }
  } finally {
    clients.stop();
  }

  const bareHeap = perConnection(bare.empty.heapBytes, bare.full.heapBytes, n);
  const bareRss = perConnection(bare.empty.rssBytes, bare.full.rssBytes, n);
  const liveHeap = perConnection(tether.empty.heapBytes, tether.live.heapBytes, n);
  const liveRss = perConnection(tether.empty.rssBytes, tether.live.rssBytes, n);
  const hibHeap = perConnection(tether.empty.heapBytes, tether.hibernated.heapBytes, n);
  const hibRss = perConnection(tether.empty.rssBytes, tether.hibernated.rssBytes, n);
  const pass = hibHeap <= TARGET * bareHeap;
  const count = fmt.int(n);
  const reading = (m: ServerMemory) => `heap ${mb(m.heapBytes)}, RSS ${mb(m.rssBytes)}`;

  ctx.settings.push(
    `Density (g): ${count} ws connections${ctx.quick ? ` (quick mode; the full run uses ${fmt.int(CONNECTIONS)})` : ''}. Tether: \`tetherServer\` + SessionManager (JetStream event log, KV conversation and snapshot stores on the bench's nats-server, fresh names; scripted agent; in-memory runtimes; default limits) on a real port in a child process \`node ${HEAP_NODE_FLAGS.join(' ')} bench/densityServer.ts\`; ${count} conversations created and started (one user each, all \`awaiting_user_input\`), each with one ws client on \`/ws?conversation_id=…&after_seq=<its last seq>\`, connected once its \`sync\` frame arrived. Hibernated: \`manager.passivate(id, 'idle')\` of every conversation (the call the idle rule, TETHER_IDLE_MS, makes; 200 at a time) with the connections open. Baseline: a bare \`new WebSocketServer({ host, port })\` with no logic (a shared no-op \`error\` listener per socket) in its own child process with the same flags, holding ${count} idle connections. All clients run in a third node process (\`bench/densityClients.ts\`, 200 connecting at a time, no permessage-deflate).`,
    `Density readings: \`heapUsed\` after \`global.gc()\` repeated until the heap stops shrinking, then VmRSS from /proc/self/status, in the server's own process: empty (listening, no connection; after a warm-up of ${WARM_UP} connections opened and closed, on Tether ${WARM_UP} conversations created, connected, hibernated, woken by a message and deleted, so that both empty figures include the code those paths load), with the ${count} connections (Tether: sessions live), and (Tether) after hibernating them. Per connection = (reading − empty) ÷ ${count}. Ratios: Tether ÷ bare ws.`,
  );
  ctx.runs.push(
    `density, bare ws: empty ${reading(bare.empty)}; ${count} connections ${reading(bare.full)} (connected in ${(bare.connectMs / 1000).toFixed(1)} s)`,
    `density, Tether: empty ${reading(tether.empty)}; ${count} live sessions with a connection each ${reading(tether.live)} (liveCount ${fmt.int(tether.live.liveCount)}); hibernated ${reading(tether.hibernated)} (liveCount ${tether.hibernated.liveCount}, ${fmt.int(tether.hibernated.connections)} connections open). Created and started in ${(tether.created.ms / 1000).toFixed(1)} s, clients connected in ${(tether.connectMs / 1000).toFixed(1)} s, hibernated in ${(tether.passivateMs / 1000).toFixed(1)} s.`,
  );
  ctx.notes.push(
    `Density check: after hibernation all ${count} client sockets were open and each had received its conversation's \`session_passivated\` event; then ${SAMPLE} clients spread over the ${count} each sent a message on the open connection and got \`session_rehydrated\`, their message and the agent's answer as event frames (in ${fmt.ms(tether.checkMs)} ms); afterwards ${tether.liveAfterCheck} sessions were in memory: only those.`,
    `Density, per connection: Tether with live sessions ${kb(liveHeap)} heap, ${kb(liveRss)} RSS; hibernated ${kb(hibHeap)} heap, ${kb(hibRss)} RSS; bare ws ${kb(bareHeap)} heap, ${kb(bareRss)} RSS. The hibernated figures are growth over the empty server, so they also count what the live sessions left behind in tables V8 does not shrink (see (e2)); RSS keeps pages the heap freed, so the hibernated RSS stays near the live one.`,
    ...breakdown,
  );
  if (!pass) {
    ctx.notes.push(`**Density target missed** (g2): a hibernated Tether connection costs ${kb(hibHeap)} of heap, ${fmt.ratio(hibHeap / bareHeap)}× a bare ws connection (${kb(bareHeap)}); the target is ≤ ${TARGET}×, i.e. ${kb(TARGET * bareHeap)}, missed by ${kb(hibHeap - TARGET * bareHeap)} per connection. The heap snapshot breakdown above shows what it holds.`);
  }

  const rows: Row[] = [
    {
      measurement: `(g) density: heap per ws connection, ${count} conversations with one connection each, sessions live, vs a bare \`ws\` server holding ${count} idle connections`,
      tether: `${kb(liveHeap)}/connection`,
      baseline: `${kb(bareHeap)}/connection`,
      ratio: liveHeap / bareHeap,
      target: '— (no target)',
    },
    {
      measurement: `(g2) density: heap per ws connection, the same ${count} sessions hibernated (liveCount ${tether.hibernated.liveCount}, connections open and working) vs the bare ws server`,
      tether: `${kb(hibHeap)}/connection`,
      baseline: `${kb(bareHeap)}/connection`,
      ratio: hibHeap / bareHeap,
      target: `≤ ${TARGET}`,
      pass,
    },
    {
      measurement: `(g3) density: RSS per ws connection, ${count} live sessions vs the bare ws server`,
      tether: `${kb(liveRss)}/connection`,
      baseline: `${kb(bareRss)}/connection`,
      ratio: liveRss / bareRss,
      target: '— (no target)',
    },
    {
      measurement: `(g4) density: RSS per ws connection, ${count} hibernated sessions vs the bare ws server`,
      tether: `${kb(hibRss)}/connection`,
      baseline: `${kb(bareRss)}/connection`,
      ratio: hibRss / bareRss,
      target: '— (no target)',
    },
  ];
  return { rows, profiles: [] };
}
