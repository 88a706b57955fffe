// (m, n) Time travel and fork on a long conversation: the state at a past
// event, folded from the nearest checkpoint the owner wrote, against a fold
// from the creation; a fork of a prefix, against appending its events one by one.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import type { ConversationState, LoggedEvent, StoredEvent } from '../protocol/index.ts';
import { memoryRuntimeProvider } from '../src/runtime/memoryRuntime.ts';
import { DEFAULT_LIMITS, type NodeHost } from '../src/host/index.ts';
import { memoryCheckpointStore, type CheckpointStore, type NatsConnection, type Stores } from '../src/store/index.ts';
import { createTether, type Tether } from '../src/tether.ts';
import { benchStores } from './benchStores.ts';
import { within } from './measure.ts';
import { chat } from './rehydrateBench.ts';

const USER = 'timetravel-user';

export interface TimeTravelFixture {
  /** The owner: it wrote the conversation and its checkpoints. */
  manager: NodeHost;
  /** The same stores but an empty checkpoint store: every look folds from the creation. */
  unchecked: NodeHost;
  stores: Stores;
  conversationId: string;
  user: string;
  /** The conversation's events, in order. */
  events: LoggedEvent[];
  /** Stream sequences of the checkpoints the owner wrote, ascending. */
  checkpointSeqs: number[];
  buildMs: number;
  drop(): Promise<void>;
}

/**
 * A conversation of `events` stored events written by a real NodeHost
 * on bench stores (JetStream log, KV stores and checkpoint bucket, scripted
 * agent, in-memory runtime, default limits: a checkpoint every 100 events),
 * one chat round at a time, then passivated; beside it a second manager on the
 * same stores with an empty checkpoint store.
 */
export async function timeTravelFixture(
  nc: NatsConnection,
  events: number,
  tag: string,
  timeoutMs: number,
): Promise<TimeTravelFixture> {
  const { stores, dispose } = await benchStores(nc, 'timetravel', tag);
  const tethers: Tether[] = [];
  const managerOn = (checkpoints: CheckpointStore): NodeHost => {
    const tether = createTether({
      stores: { ...stores, checkpoints },
      runtimes: memoryRuntimeProvider(),
      agent: scriptedAgent(),
      logger: silentLogger,
    });
    tethers.push(tether);
    return tether.host;
  };
  const drop = async () => {
    await Promise.allSettled(tethers.map((t) => t.close()));
    await dispose();
  };
  try {
    const manager = managerOn(stores.checkpoints);
    const unchecked = managerOn(memoryCheckpointStore());
    const t0 = performance.now();
    const conversationId = await within(
      timeoutMs,
      'building the time-travel conversation',
      chat(manager, stores.log, events, USER),
    );
    await manager.passivate(conversationId, 'close_delay');
    const buildMs = performance.now() - t0;
    const { items } = await stores.log.read(conversationId);
    if (items.at(-1)?.event.type !== 'session_passivated')
      throw new Error(`the conversation does not end passivated (${items.at(-1)?.event.type})`);
    const checkpointSeqs = await checkpointsOf(stores.checkpoints, conversationId, items.at(-1)!.seq);
    // One each time the count passes a multiple; the last may still be on its way.
    const expected = Math.floor(items.length / DEFAULT_LIMITS.checkpointEvery) - 1;
    if (checkpointSeqs.length < expected)
      throw new Error(`the owner wrote ${checkpointSeqs.length} checkpoints, at least ${expected} expected`);
    return { manager, unchecked, stores, conversationId, user: USER, events: items, checkpointSeqs, buildMs, drop };
  } catch (err) {
    await drop();
    throw err;
  }
}

/** Every checkpoint of the conversation, walked down from its last event with `before`. */
async function checkpointsOf(checkpoints: CheckpointStore, id: string, lastSeq: number): Promise<number[]> {
  const seqs: number[] = [];
  for (let below = lastSeq + 1; ;) {
    const found = await checkpoints.before(id, below);
    if (!found) return seqs.reverse();
    seqs.push(found.seq);
    below = found.seq;
  }
}

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; result: T }> {
  const t0 = performance.now();
  const result = await work();
  return { ms: performance.now() - t0, result };
}

function expectSeq(state: ConversationState, seq: number): void {
  if (state.seq !== seq) throw new Error(`stateAt(${seq}) answered the state at ${state.seq}`);
}

/** (m) `manager.stateAt` at `seq`, the owner's checkpoints in reach: what `GET .../state?at_seq=` runs. */
export async function seek(f: TimeTravelFixture, seq: number): Promise<number> {
  const run = await timed(() => f.manager.queries.stateAt(f.conversationId, f.user, seq));
  expectSeq(run.result, seq);
  return run.ms;
}

/** (m) baseline: the same `stateAt` of the last event with no checkpoint, so every event is read and folded. */
export async function fullFold(f: TimeTravelFixture): Promise<number> {
  const seq = f.events.at(-1)!.seq;
  const run = await timed(() => f.unchecked.queries.stateAt(f.conversationId, f.user, seq));
  expectSeq(run.result, seq);
  return run.ms;
}

/** The seek and the fold from the creation agree on the state at `seq` (untimed check). */
export async function checkSeek(f: TimeTravelFixture, seq: number): Promise<void> {
  const [near, full] = await Promise.all([
    f.manager.queries.stateAt(f.conversationId, f.user, seq),
    f.unchecked.queries.stateAt(f.conversationId, f.user, seq),
  ]);
  if (JSON.stringify(near) !== JSON.stringify(full))
    throw new Error(`at seq ${seq} the fold from a checkpoint differs from the fold from the creation`);
}

/**
 * (n) `manager.fork` at the conversation's `n`th event, until it returns
 * (parent read, fold, copy with its checkpoints, the fork's first decision).
 * Untimed afterwards: the fork's log is checked and the fork deleted.
 */
export async function forkAt(f: TimeTravelFixture, n: number): Promise<number> {
  const at = f.events[n - 1]!;
  const run = await timed(() => f.manager.commands.fork(f.conversationId, f.user, at.seq));
  const id = run.result.conversation_id;
  const copied = await f.stores.log.read(id, { limit: n + 1 });
  const last = copied.items[n - 1]?.event;
  if (last?.id !== at.event.id || last.type !== at.event.type || last.conversation_id !== id)
    throw new Error(`fork ${id}: its event ${n - 1} is not a copy of the parent's`);
  if (copied.items[n]?.event.type !== 'conversation_forked')
    throw new Error(`fork ${id}: no conversation_forked after the ${n} copied events`);
  await f.manager.commands.delete(id, f.user);
  return run.ms;
}

/**
 * (n) baseline: the parent's first `n` events appended to a fresh conversation
 * through the EventLog, one after the other, each expecting the one before:
 * the floor of a sequential copy. Untimed afterwards: checked, then purged.
 */
export async function appendCopy(f: TimeTravelFixture, n: number): Promise<number> {
  const { log } = f.stores;
  const id = randomUUID().replaceAll('-', '');
  const copies: StoredEvent[] = f.events.slice(0, n).map(({ event }) => ({ ...event, conversation_id: id }));
  let lastSeq = 0;
  const run = await timed(async () => {
    for (const event of copies) lastSeq = (await log.append(event, { expectedLastSeq: lastSeq })).seq;
  });
  const stored = await log.read(id);
  if (stored.items.length !== n || stored.items.at(-1)?.seq !== lastSeq)
    throw new Error(`appended ${n} events to ${id}, the log holds ${stored.items.length}`);
  await log.purge(id);
  return run.ms;
}
