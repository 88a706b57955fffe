// The density step's runs: a bare ws server, then a Tether server, each in a
// node process of its own (--expose-gc) holding n connections from the client
// process, read empty and full. Every count the readings rely on is checked.
import type { BareWsProtocol, ServerMemory } from './bareWsServer.ts';
import type { ClientsProtocol, ClientsStatus } from './densityClients.ts';
import { USER_PARAM, type Created, type DensityProtocol, type TetherMemory } from './densityServer.ts';
import { perThing, type HeapKind } from './densitySnapshot.ts';
import { GC_NODE_FLAGS, NODE_FLAGS, benchFile } from './benchFiles.ts';
import { BenchChild, benchUser } from './heapBench.ts';
import { fmt, progress } from './measure.ts';

/**
 * Connections opened and closed (on Tether: conversations created, connected,
 * hibernated, woken by a message and deleted) before the empty reading, so
 * that both empty figures include the code those paths load.
 */
export const WARM_UP = 20;
/** Hibernated conversations whose clients send a message afterwards, to show that their connections still work. */
export const SAMPLE = 20;

export type Clients = BenchChild<ClientsProtocol>;

export function startClients(name = 'the density clients'): Clients {
  return new BenchChild(benchFile('densityClients'), name, NODE_FLAGS);
}

export interface BareRun {
  empty: ServerMemory;
  full: ServerMemory;
  connectMs: number;
  /** Per connection, by kind of object: only when asked for heap snapshots. */
  kinds?: HeapKind[];
}

export interface TetherRun {
  empty: TetherMemory;
  live: TetherMemory;
  hibernated: TetherMemory;
  created: Created;
  connectMs: number;
  passivateMs: number;
  status: ClientsStatus;
  /** Clients that made a round trip after hibernation, how long it took, and the sessions in memory afterwards. */
  checked: number;
  checkMs: number;
  liveAfterCheck: number;
  kinds?: HeapKind[];
}

export interface RunOptions {
  n: number;
  /** Bound on each command to a process. */
  timeoutMs: number;
  /** Heap snapshots before and after the connections (they grow the RSS: not in runs whose figures are kept). */
  snapshots: boolean;
}

function expect(what: string, got: number, want: number): void {
  if (got !== want) throw new Error(`density: ${what} is ${got}, expected ${want}`);
}

/** The bare ws baseline: warm-up connections opened and closed, empty reading, n idle connections, reading. */
export async function bareRun(clients: Clients, { n, timeoutMs, snapshots }: RunOptions): Promise<BareRun> {
  const server = new BenchChild<BareWsProtocol>(benchFile('bareWsServer'), 'the bare ws server', GC_NODE_FLAGS);
  const connect = (url: string, count: number) =>
    clients.ask('connect', { urls: Array.from({ length: count }, () => url), sync: false }, timeoutMs);
  try {
    const { port } = await server.ask('start', {}, timeoutMs);
    const url = `ws://127.0.0.1:${port}/`;
    await connect(url, WARM_UP);
    await clients.ask('close', {}, timeoutMs);
    const empty = await server.ask('measure', {}, timeoutMs);
    expect('connections of the empty bare ws server', empty.connections, 0);
    const before = snapshots ? await server.ask('heapByKind', {}, timeoutMs) : undefined;
    const { ms: connectMs } = await connect(url, n);
    const full = await server.ask('measure', {}, timeoutMs);
    expect('connections the bare ws server holds', full.connections, n);
    const kinds = before && perThing(before, await server.ask('heapByKind', {}, timeoutMs), n);
    await clients.ask('close', {}, timeoutMs);
    await server.ask('close', {}, timeoutMs);
    return { empty, full, connectMs, kinds };
  } finally {
    server.stop();
  }
}

type TetherServerChild = BenchChild<DensityProtocol>;

/** Connects one client per conversation, each on its user and after its last seq, and waits for every `sync`. */
function connectTo(
  clients: Clients,
  port: number,
  created: Created,
  first: number,
  timeoutMs: number,
): Promise<{ ms: number }> {
  const urls = created.ids.map(
    (id, i) =>
      `ws://127.0.0.1:${port}/ws?conversation_id=${id}&after_seq=${created.cursors[i]}&${USER_PARAM}=${benchUser(first + i)}`,
  );
  return clients.ask('connect', { urls, sync: true }, timeoutMs);
}

/** The warm-up on conversations of their own (users after the measured ones), deleted before the empty reading. */
async function warmUp(
  server: TetherServerChild,
  clients: Clients,
  port: number,
  n: number,
  timeoutMs: number,
): Promise<void> {
  const warm = await server.ask('create', { count: WARM_UP, first: n }, timeoutMs);
  await connectTo(clients, port, warm, n, timeoutMs);
  await server.ask('passivate', { ids: warm.ids }, timeoutMs);
  await clients.ask('check', { indexes: warm.ids.map((_, i) => i), timeoutMs }, timeoutMs);
  await clients.ask('close', {}, timeoutMs);
  await server.ask('delete', { ids: warm.ids, first: n }, timeoutMs);
}

/** After hibernation every socket is open and was told; a sample of clients (spread over all) each make a round trip that wakes only their session. */
async function checkHibernated(server: TetherServerChild, clients: Clients, n: number, timeoutMs: number) {
  const status = await clients.ask('status', {}, timeoutMs);
  expect('open client sockets after hibernation', status.open, n);
  expect('client sockets lost after hibernation', status.lost, 0);
  expect('clients told that their session hibernated', status.sawPassivation, n);
  const checked = Math.min(SAMPLE, n);
  const indexes = Array.from({ length: checked }, (_, k) => Math.floor((k * n) / checked));
  const { ms: checkMs } = await clients.ask('check', { indexes, timeoutMs }, timeoutMs);
  const liveAfterCheck = (await server.ask('measure', {}, timeoutMs)).liveCount;
  expect('sessions in memory after the sample woke theirs', liveAfterCheck, checked);
  return { status, checked, checkMs, liveAfterCheck };
}

/**
 * Tether: warm-up, empty reading; n conversations created and started, one
 * client each (connected on `sync`), reading with live sessions; every session
 * passivated with its connection open, reading; then the check.
 */
export async function tetherRun(
  clients: Clients,
  natsUrl: string,
  tag: string,
  { n, timeoutMs, snapshots }: RunOptions,
): Promise<TetherRun> {
  const server: TetherServerChild = new BenchChild(benchFile('densityServer'), 'the density server', GC_NODE_FLAGS);
  try {
    const { port } = await server.ask('start', { natsUrl, tag }, timeoutMs);
    await warmUp(server, clients, port, n, timeoutMs);
    const empty = await server.ask('measure', {}, timeoutMs);
    expect('connections of the empty Tether server', empty.connections, 0);
    expect('sessions in memory in the empty Tether server', empty.liveCount, 0);
    const before = snapshots ? await server.ask('heapByKind', {}, timeoutMs) : undefined;
    progress(`density: creating ${fmt.int(n)} conversations, then one ws client each`);
    const created = await server.ask('create', { count: n, first: 0 }, timeoutMs);
    const { ms: connectMs } = await connectTo(clients, port, created, 0, timeoutMs);
    const live = await server.ask('measure', {}, timeoutMs);
    expect('connections the Tether server holds (live sessions)', live.connections, n);
    expect('sessions in memory (live)', live.liveCount, n);
    progress(`density: hibernating the ${fmt.int(n)} sessions, connections open`);
    const { ms: passivateMs } = await server.ask('passivate', { ids: created.ids }, timeoutMs);
    const hibernated = await server.ask('measure', {}, timeoutMs);
    expect('connections the Tether server holds (hibernated sessions)', hibernated.connections, n);
    expect('sessions in memory (hibernated)', hibernated.liveCount, 0);
    const kinds = before && perThing(before, await server.ask('heapByKind', {}, timeoutMs), n);
    const check = await checkHibernated(server, clients, n, timeoutMs);
    await clients.ask('close', {}, timeoutMs);
    await server.ask('close', {}, timeoutMs);
    return { empty, live, hibernated, created, connectMs, passivateMs, ...check, kinds };
  } finally {
    server.stop();
  }
}
