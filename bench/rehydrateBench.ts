// (c, d) Bringing a long conversation back into memory: from its snapshot,
// and by folding its whole log, against the raw JetStream reads they stand on.
import { performance } from 'node:perf_hooks';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { foldEvents } from '../machines/index.ts';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { CreateConversationBody, type LoggedEvent } from '../protocol/index.ts';
import { memoryRuntimeProvider } from '../src/runtime/memoryRuntime.ts';
import { readStoredState, type StoredRead } from '../src/conversation/index.ts';
import { type NodeHost } from '../src/host/index.ts';
import { createTether } from '../src/tether.ts';
import { benchStoreNames, deleteBenchStores } from './benchStores.ts';
import {
  jetStreamEventLog,
  kvConversationStore,
  kvCheckpointStore,
  kvSnapshotStore,
  natsStatusChannel,
  memorySnapshotStore,
  subjectFor,
  type EventLog,
  type JetStreamEventLog,
  type KvSnapshotStore,
  type NatsConnection,
} from '../src/store/index.ts';
import { messageText } from './benchClient.ts';
import { listened, within } from './measure.ts';
import type { ReadFixture } from './readBench.ts';

const USER = 'rehydrate-user';
/** `session_passivated` and the runtime's `stopped` status: what passivation adds. */
const PASSIVATION_EVENTS = 2;

export interface RehydrateFixture {
  host: NodeHost;
  log: JetStreamEventLog;
  snapshots: KvSnapshotStore;
  conversationId: string;
  /** Stored events of the conversation when it was passivated. */
  events: number;
  buildMs: number;
  /** The same conversation for `rawRead` (readBench), on the baseline's own connection. */
  raw: ReadFixture;
  /** The snapshot bucket and the stream, opened on the baseline's connection. */
  rawKv: KV;
  rawJsm: JetStreamManager;
  drop(): Promise<void>;
}

/**
 * A conversation of `events` stored events, written by a real NodeHost
 * (JetStream log, KV stores, scripted agent, in-memory runtime): start-up,
 * then rounds of user message, `running`, agent reply, `awaiting_user_input`,
 * one round at a time as a user would chat, then passivated (snapshot written).
 */
export async function rehydrateFixture(
  nc: NatsConnection,
  rawNc: NatsConnection,
  events: number,
  tag: string,
  timeoutMs: number,
): Promise<RehydrateFixture> {
  const names = benchStoreNames('rehydrate', tag);
  const { stream } = names;
  // The concrete stores: the baseline reads the same stream and bucket raw.
  const log = await jetStreamEventLog(nc, names);
  const snapshots = await kvSnapshotStore(nc, { bucket: names.snapshotBucket });
  const conversations = await kvConversationStore(nc, { bucket: names.conversationBucket });
  const tether = createTether({
    stores: {
      log,
      conversations,
      snapshots,
      checkpoints: await kvCheckpointStore(nc, { bucket: names.checkpointBucket }),
      status: natsStatusChannel(nc, names.subjectPrefix),
    },
    runtimes: memoryRuntimeProvider(),
    agent: scriptedAgent(),
    logger: silentLogger,
  });
  const { host } = tether;
  const drop = async () => {
    await tether.close();
    await deleteBenchStores(nc, names);
  };
  try {
    const t0 = performance.now();
    const conversationId = await within(timeoutMs, 'building the rehydration conversation', chat(host, log, events));
    await host.passivate(conversationId, 'close_delay');
    const buildMs = performance.now() - t0;
    const last = await log.last(conversationId);
    const snapshot = await snapshots.get(conversationId);
    if (!last || last.event.type !== 'session_passivated')
      throw new Error(`the conversation does not end passivated (${last?.event.type})`);
    if (snapshot?.seq !== last.seq)
      throw new Error(`the snapshot stands at seq ${snapshot?.seq}, the log at ${last.seq}`);
    if (host.liveCount !== 0) throw new Error('the session is still in memory after passivation');
    const count = last.event.id + 1;
    const raw: ReadFixture = {
      log,
      js: jetstream(rawNc),
      stream,
      subject: subjectFor(log.subjectPrefix, conversationId),
      conversationId,
      count,
      drop: async () => {},
    };
    const rawKv = await new Kvm(rawNc).open(names.snapshotBucket);
    const rawJsm = await jetstreamManager(rawNc);
    return { host, log, snapshots, conversationId, events: count, buildMs, raw, rawKv, rawJsm, drop };
  } catch (err) {
    await drop();
    throw err;
  }
}

/**
 * Creates a conversation of `user` and chats, one round at a time, until
 * passivation will make it `events` long (the time-travel step builds its own the same way).
 */
export async function chat(host: NodeHost, log: EventLog, events: number, user = USER): Promise<string> {
  const { conversation_id: id } = await host.commands.create(
    user,
    CreateConversationBody.parse({ max_iterations: 10_000 }),
  );
  let idle = -1;
  let wake: (() => void) | null = null;
  const unsubscribe = await listened(
    host.feed.listen(id, 0, {
      event: ({ event }: LoggedEvent) => {
        if (event.type !== 'agent_state_changed' || event.data.state !== 'awaiting_user_input') return;
        idle = event.id;
        wake?.();
      },
      status: () => {},
    }),
  );
  try {
    // Start-up may have ended before the subscription: its last stored event is the idle state fact.
    for (;;) {
      const last = await log.last(id);
      if (last?.event.type === 'agent_state_changed' && last.event.data.state === 'awaiting_user_input') {
        idle = Math.max(idle, last.event.id);
        break;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    const rounds = Math.floor((events - (idle + 1) - PASSIVATION_EVENTS) / 4);
    for (let round = 0; round < rounds; round++) {
      const before = idle;
      const answered = new Promise<void>((resolve) => (wake = () => idle > before && resolve()));
      await host.commands.act(id, user, { type: 'message', content: messageText(0, round) });
      if (idle <= before) await answered;
    }
    return id;
  } finally {
    unsubscribe();
  }
}

export interface Timed<T> {
  ms: number;
  result: T;
}

async function timed<T>(work: () => Promise<T>): Promise<Timed<T>> {
  const t0 = performance.now();
  const result = await work();
  return { ms: performance.now() - t0, result };
}

/** `readStoredState` with the snapshot the passivation wrote: nothing left to fold. */
export async function loadFromSnapshot(f: RehydrateFixture): Promise<Timed<StoredRead>> {
  const run = await timed(() => readStoredState(f.log, f.snapshots, f.conversationId));
  const loaded = run.result;
  if (loaded?.from !== 'snapshot' || loaded.folded !== 0)
    throw new Error(`expected a snapshot load with nothing to fold, got ${loaded?.from} + ${loaded?.folded}`);
  if (loaded.state.nextEventId !== f.events)
    throw new Error(`the snapshot load ends at event ${loaded.state.nextEventId}, the log at ${f.events}`);
  return { ms: run.ms, result: loaded };
}

/**
 * The baseline for a snapshot load: the two reads it cannot avoid, raw: the
 * snapshot's KV entry (JSON.parse), then the subject's last message (is
 * anything stored after the snapshot?).
 */
export async function rawSnapshotRead(f: RehydrateFixture): Promise<Timed<number>> {
  return timed(async () => {
    const record = (await f.rawKv.get(f.conversationId))?.json<{ seq: number }>();
    if (!record) throw new Error('the raw KV read found no snapshot');
    const last = await f.rawJsm.direct.getMessage(f.raw.stream, { last_by_subj: f.raw.subject });
    if (last?.seq !== record.seq)
      throw new Error(`raw reads: snapshot at seq ${record.seq}, last message at ${last?.seq}`);
    return last.seq;
  });
}

/** `readStoredState` with no snapshot (a fresh, empty snapshot store): read and fold the whole log. */
export async function loadByFold(f: RehydrateFixture): Promise<Timed<StoredRead>> {
  const empty = memorySnapshotStore();
  const run = await timed(() => readStoredState(f.log, empty, f.conversationId));
  const loaded = run.result;
  if (loaded?.from !== 'log' || loaded.folded !== f.events)
    throw new Error(`expected a fold of ${f.events} events, got ${loaded?.from} + ${loaded?.folded}`);
  return { ms: run.ms, result: loaded };
}

/**
 * The whole way back through the host: `host.session()` (ownership
 * check, snapshot load, actor started, `session_rehydrated` stored). The
 * session is passivated again afterwards, untimed, so every run starts alike.
 */
export async function managerRehydrate(f: RehydrateFixture): Promise<Timed<string>> {
  const run = await timed(async () => (await f.host.session(f.conversationId, USER)).state);
  const last = await f.log.last(f.conversationId);
  if (last?.event.type !== 'session_rehydrated' || last.event.data.from !== 'snapshot') {
    throw new Error(`host.session() did not rehydrate from the snapshot (last event ${last?.event.type})`);
  }
  await f.host.passivate(f.conversationId, 'close_delay');
  if (f.host.liveCount !== 0) throw new Error('the session stayed in memory after passivation');
  return run;
}

/** The two halves of a full-fold load, timed apart: `log.read` of the whole log, then `foldEvents` of it. */
export async function foldParts(f: RehydrateFixture): Promise<{ readMs: number; foldMs: number }> {
  const read = await timed(() => f.log.read(f.conversationId));
  const fold = await timed(async () => foldEvents(read.result.items));
  if (fold.result.folded !== f.events)
    throw new Error(`foldEvents folded ${fold.result.folded} events, expected ${f.events}`);
  return { readMs: read.ms, foldMs: fold.ms };
}
