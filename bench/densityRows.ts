// Rows (g to g4): density. N conversations with one ws connection each, held
// by a real Tether server, with their sessions live and then hibernated,
// against a bare `ws` server holding N idle connections: heap and RSS per
// connection. Each server runs in a node process of its own (--expose-gc),
// the clients in a third (densityRuns.ts).
import { performance } from 'node:perf_hooks';
import type { BenchContext, Measured } from './benchContext.ts';
import type { ServerMemory } from './bareWsServer.ts';
import { WARM_UP, bareRun, startClients, tetherRun, type BareRun, type TetherRun } from './densityRuns.ts';
import { OWN_NAME_NOTE, perThing, type HeapKind } from './densitySnapshot.ts';
import { GC_NODE_FLAGS } from './benchFiles.ts';
import { fmt, progress } from './measure.ts';
import type { Row } from './report.ts';

const CONNECTIONS = 10_000;
const QUICK_CONNECTIONS = 2_000;
/** Target: a hibernated connection costs at most this many times the heap of a bare ws connection. */
const TARGET = 2;

const kb = (bytes: number) => `${(bytes / 1024).toFixed(2)} KiB`;
const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

/** Growth per connection over the empty server, in bytes. */
interface PerConnection {
  bareHeap: number;
  bareRss: number;
  liveHeap: number;
  liveRss: number;
  hibernatedHeap: number;
  hibernatedRss: number;
}

function perConnection(n: number, bare: BareRun, tether: TetherRun): PerConnection {
  const growth = (from: ServerMemory, to: ServerMemory, key: 'heapBytes' | 'rssBytes') => (to[key] - from[key]) / n;
  return {
    bareHeap: growth(bare.empty, bare.full, 'heapBytes'),
    bareRss: growth(bare.empty, bare.full, 'rssBytes'),
    liveHeap: growth(tether.empty, tether.live, 'heapBytes'),
    liveRss: growth(tether.empty, tether.live, 'rssBytes'),
    hibernatedHeap: growth(tether.empty, tether.hibernated, 'heapBytes'),
    hibernatedRss: growth(tether.empty, tether.hibernated, 'rssBytes'),
  };
}

const passes = (f: PerConnection) => f.hibernatedHeap <= TARGET * f.bareHeap;

/** The heaviest kinds, as `kind ×count size` in one line. */
function kindLine(kinds: readonly HeapKind[], top: number): string {
  return kinds
    .filter(([, , bytes]) => bytes > 0)
    .slice(0, top)
    .map(([kind, count, bytes]) => `\`${kind}\` ×${count.toFixed(count < 10 ? 2 : 1)} ${bytes.toFixed(0)} B`)
    .join(', ');
}

/** What functions with an own `name` (see OWN_NAME_NOTE) hold per connection, when there are such. */
function ownNameNote(beyond: readonly HeapKind[], bareHeap: number): string[] {
  // Kinds each connection has; those below one per connection are the server's own, counted by chance in the difference.
  const ownNames = beyond.filter(([kind, count]) => kind.includes('with own name') && count >= 0.5);
  if (ownNames.length === 0) return [];
  const stores = ownNames
    .filter(([kind]) => kind.startsWith('(object properties) of '))
    .reduce((total, [, , bytes]) => total + bytes, 0);
  const functions = ownNames
    .filter(([kind]) => kind.startsWith('closure '))
    .map(([kind, count]) => `\`${kind}\` ×${count.toFixed(2)}`);
  return [
    `${OWN_NAME_NOTE} Per hibernated connection those stores hold ${kb(stores)} (${fmt.ratio(stores / bareHeap)}× a bare ws connection's heap), in: ${functions.join(', ')}.`,
  ];
}

function breakdownNotes(n: number, tether: HeapKind[], bare: HeapKind[], bareHeap: number): string[] {
  const sum = (kinds: readonly HeapKind[]) => kinds.reduce((total, [, , bytes]) => total + bytes, 0);
  const beyond = perThing(bare, tether, 1);
  return [
    `Heap snapshot breakdown (g2), from one extra run of each server with ${fmt.int(n)} connections (v8 heap snapshots before the connections and after, live objects only, growth ÷ connections, by constructor or kind; taken in extra runs because a snapshot grows the process's RSS): a hibernated Tether connection holds ${kb(sum(tether))} of objects, heaviest: ${kindLine(tether, 14)}.`,
    `A bare ws connection holds ${kb(sum(bare))}: ${kindLine(bare, 10)}.`,
    `What a hibernated Tether connection holds beyond a bare ws connection, heaviest kinds: ${kindLine(beyond, 14)}.`,
    ...ownNameNote(beyond, bareHeap),
  ];
}

/** Extra runs of both servers with heap snapshots, side by side (the bare one with clients of its own: they count objects, not time). */
async function snapshotBreakdown(ctx: BenchContext, n: number, bareHeap: number): Promise<string[]> {
  progress(
    'density: heap snapshots of a bare ws connection and a hibernated Tether connection (extra runs, side by side)',
  );
  const options = { n, timeoutMs: 5 * ctx.stepTimeoutMs, snapshots: true };
  const bareClients = startClients('the density clients (bare ws snapshots)');
  const tetherClients = startClients('the density clients (Tether snapshots)');
  try {
    const [bare, tether] = await Promise.all([
      bareRun(bareClients, options),
      tetherRun(tetherClients, ctx.natsUrl, `${ctx.runId}p`, options),
    ]);
    return breakdownNotes(n, tether.kinds!, bare.kinds!, bareHeap);
  } finally {
    bareClients.stop();
    tetherClients.stop();
  }
}

function describe(ctx: BenchContext, n: number, bare: BareRun, tether: TetherRun, f: PerConnection): void {
  const count = fmt.int(n);
  const reading = (m: ServerMemory) => `heap ${mb(m.heapBytes)} (code ${mb(m.codeBytes)}), RSS ${mb(m.rssBytes)}`;
  const code = (from: ServerMemory, to: ServerMemory) => kb((to.codeBytes - from.codeBytes) / n);
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  ctx.settings.push(
    `Density (g to g4): ${count} ws connections${ctx.quick ? ` (quick mode; the full run uses ${fmt.int(CONNECTIONS)})` : ''}. Tether: \`tetherServer\` + NodeHost (JetStream event log, KV conversation and snapshot stores on the bench's nats-server, fresh names; scripted agent; in-memory runtimes; default limits) on a real port in a child process \`node ${GC_NODE_FLAGS.join(' ')} bench/densityServer\`; ${count} conversations created and started (one user each, all \`awaiting_user_input\`), each with one ws client on \`/ws?conversation_id=…&after_seq=<its last seq>\`, connected once its \`sync\` frame arrived. Hibernated: \`manager.passivate(id, 'idle')\` of every conversation (the call the idle rule, TETHER_IDLE_MS, makes; 200 at a time) with the connections open. Baseline: a bare \`new WebSocketServer({ host, port })\` with no logic (a shared no-op \`error\` listener per socket) in its own child process with the same flags, holding ${count} idle connections. All clients run in a third node process (\`bench/densityClients.ts\`, 200 connecting at a time, no permessage-deflate).`,
    `Density readings: \`heapUsed\` after \`global.gc()\` repeated until the heap stops shrinking, then VmRSS from /proc/self/status, in the server's own process: empty (listening, no connection; after a warm-up of ${WARM_UP} connections opened and closed, on Tether ${WARM_UP} conversations created, connected, hibernated, woken by a message and deleted, so that both empty figures include the code those paths load), with the ${count} connections (Tether: sessions live), and (Tether) after hibernating them. Per connection = (reading − empty) ÷ ${count}. Ratios: Tether ÷ bare ws.`,
  );
  ctx.runs.push(
    `density, bare ws: empty ${reading(bare.empty)}; ${count} connections ${reading(bare.full)} (connected in ${s(bare.connectMs)})`,
    `density, Tether: empty ${reading(tether.empty)}; ${count} live sessions with a connection each ${reading(tether.live)} (liveCount ${fmt.int(tether.live.liveCount)}); hibernated ${reading(tether.hibernated)} (liveCount ${tether.hibernated.liveCount}, ${fmt.int(tether.hibernated.connections)} connections open). Created and started in ${s(tether.created.ms)}, clients connected in ${s(tether.connectMs)}, hibernated in ${s(tether.passivateMs)}.`,
  );
  ctx.notes.push(
    `Density check: after hibernation all ${count} client sockets were open and each had received its conversation's \`session_passivated\` event; then ${tether.checked} clients spread over the ${count} each sent a message on their open connection and got \`session_rehydrated\`, their message and the agent's answer as event frames (in ${fmt.ms(tether.checkMs)} ms); afterwards ${tether.liveAfterCheck} sessions were in memory: only those.`,
    `Density, per connection: Tether with live sessions ${kb(f.liveHeap)} heap, ${kb(f.liveRss)} RSS; hibernated ${kb(f.hibernatedHeap)} heap, ${kb(f.hibernatedRss)} RSS; bare ws ${kb(f.bareHeap)} heap, ${kb(f.bareRss)} RSS. The hibernated figures are growth over the empty server, so they also count what the live sessions left behind in tables V8 does not shrink (see (e2)); RSS keeps pages the heap freed. The heap figures include V8's code space, which grows with the code the run made hot (compiled once, not per connection, divided by ${count} all the same): ${code(tether.empty, tether.live)} per connection live, ${code(tether.empty, tether.hibernated)} hibernated, ${code(bare.empty, bare.full)} bare ws.`,
  );
}

function densityRows(n: number, tether: TetherRun, f: PerConnection): Row[] {
  const count = fmt.int(n);
  const row = (measurement: string, value: number, base: number, target?: { text: string; pass: boolean }): Row => ({
    measurement,
    tether: `${kb(value)}/connection`,
    baseline: `${kb(base)}/connection`,
    ratio: value / base,
    target: target?.text ?? '— (no target)',
    ...(target && { pass: target.pass }),
  });
  return [
    row(
      `(g) density: heap per ws connection, ${count} conversations with one connection each, sessions live, vs a bare \`ws\` server holding ${count} idle connections`,
      f.liveHeap,
      f.bareHeap,
    ),
    row(
      `(g2) density: heap per ws connection, the same ${count} sessions hibernated (liveCount ${tether.hibernated.liveCount}, connections open and working) vs the bare ws server`,
      f.hibernatedHeap,
      f.bareHeap,
      { text: `≤ ${TARGET}`, pass: passes(f) },
    ),
    row(`(g3) density: RSS per ws connection, ${count} live sessions vs the bare ws server`, f.liveRss, f.bareRss),
    row(
      `(g4) density: RSS per ws connection, ${count} hibernated sessions vs the bare ws server`,
      f.hibernatedRss,
      f.bareRss,
    ),
  ];
}

export async function measureDensity(ctx: BenchContext, forceProfile: boolean): Promise<Measured> {
  const n = ctx.quick ? QUICK_CONNECTIONS : CONNECTIONS;
  progress(`density: ${fmt.int(n)} ws connections, a bare ws server, then Tether (sessions live, then hibernated)`);
  const t0 = performance.now();
  const took = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
  // Creating and hibernating 10,000 conversations on JetStream takes a while on a small machine: generous bounds.
  const options = { n, timeoutMs: 5 * ctx.stepTimeoutMs, snapshots: false };
  const clients = startClients();
  let bare: BareRun;
  let tether: TetherRun;
  try {
    bare = await bareRun(clients, options);
    progress(`density: bare ws measured (${took()})`);
    tether = await tetherRun(clients, ctx.natsUrl, `${ctx.runId}d`, options);
    progress(`density: Tether measured (${took()})`);
  } finally {
    clients.stop();
  }
  const f = perConnection(n, bare, tether);
  describe(ctx, n, bare, tether, f);
  if (!passes(f) || forceProfile) {
    ctx.notes.push(...(await snapshotBreakdown(ctx, n, f.bareHeap)));
    progress(`density: heap snapshots taken (${took()})`);
  }
  if (!passes(f)) {
    ctx.notes.push(
      `**Density target missed** (g2): a hibernated Tether connection costs ${kb(f.hibernatedHeap)} of heap, ${fmt.ratio(f.hibernatedHeap / f.bareHeap)}× a bare ws connection (${kb(f.bareHeap)}); the target is ≤ ${TARGET}×, i.e. ${kb(TARGET * f.bareHeap)}, missed by ${kb(f.hibernatedHeap - TARGET * f.bareHeap)} per connection. The heap snapshot breakdown above shows what it holds.`,
    );
  }
  return { rows: densityRows(n, tether, f), profiles: [] };
}
