import type { NatsConnection } from '@nats-io/transport-node';
import type { CheckpointStore } from './checkpointStore.ts';
import type { ConversationStore } from './conversationStore.ts';
import type { EventLog } from './eventLog.ts';
import { jetStreamEventLog } from './jetStreamEventLog.ts';
import { kvCheckpointStore } from './kvCheckpointStore.ts';
import { kvConversationStore } from './kvConversationStore.ts';
import { kvSnapshotStore } from './kvSnapshotStore.ts';
import { memoryCheckpointStore } from './memoryCheckpointStore.ts';
import { memoryConversationStore } from './memoryConversationStore.ts';
import { memoryEventLog, type MemoryEventLog } from './memoryEventLog.ts';
import { memorySnapshotStore } from './memorySnapshotStore.ts';
import type { SnapshotStore } from './snapshotStore.ts';
import { memoryStatusChannel, natsStatusChannel, type StatusChannel } from './statusChannel.ts';
import { memoryDeltaChannel, natsDeltaChannel, type DeltaChannel } from './deltaChannel.ts';
import type { Replication } from './streamSettings.ts';
import type { TailLimits } from './logTail.ts';

/** Everything a Tether keeps: the event log, conversation records, snapshots, checkpoints. */
export interface Stores {
  log: EventLog;
  conversations: ConversationStore;
  snapshots: SnapshotStore;
  checkpoints: CheckpointStore;
  /** Transient status frames, from the node that runs a session to every node's clients. */
  status: StatusChannel;
  /** Transient deltas of agent replies, from the node that runs a session to every node's clients. */
  deltas: DeltaChannel;
}

/** Where the stores live on NATS; each name defaults to the documented one. */
export interface JetStreamStoreNames {
  /** Event stream (default `TETHER_EVENTS`). */
  stream?: string;
  /** Event subjects are `<subjectPrefix>.<conversationId>.events` (default `tether.conv`). */
  subjectPrefix?: string;
  /** KV bucket of conversation records (default `tether_conversations`). */
  conversationBucket?: string;
  /** KV bucket of snapshots (default `tether_snapshots`). */
  snapshotBucket?: string;
  /** KV bucket of checkpoints (default `tether_checkpoints`). */
  checkpointBucket?: string;
}

export interface JetStreamStoreOptions extends JetStreamStoreNames, Replication {
  /** Told when the event log's follow failed; it starts again where it stopped (see JetStreamEventLogOptions). */
  onFollowError?: (err: unknown) => void;
  /** What the follow keeps of each followed conversation to serve a resume from memory (see TailLimits). */
  tail?: Partial<TailLimits>;
}

/** The stores on JetStream and KV, creating the stream and buckets when missing and bringing their replicas to `names.replicas`. */
export async function jetStreamStores(nc: NatsConnection, names: JetStreamStoreOptions = {}): Promise<Stores> {
  const [log, conversations, snapshots, checkpoints] = await Promise.all([
    jetStreamEventLog(nc, {
      stream: names.stream,
      subjectPrefix: names.subjectPrefix,
      replicas: names.replicas,
      onFollowError: names.onFollowError,
      tail: names.tail,
    }),
    kvConversationStore(nc, { bucket: names.conversationBucket, replicas: names.replicas }),
    kvSnapshotStore(nc, { bucket: names.snapshotBucket, replicas: names.replicas }),
    kvCheckpointStore(nc, { bucket: names.checkpointBucket, replicas: names.replicas }),
  ]);
  return {
    log,
    conversations,
    snapshots,
    checkpoints,
    status: natsStatusChannel(nc, names.subjectPrefix),
    deltas: natsDeltaChannel(nc, names.subjectPrefix),
  };
}

/** The in-memory twins: for tests and for trying Tether without NATS. */
export function memoryStores(): Stores & { log: MemoryEventLog } {
  return {
    log: memoryEventLog(),
    conversations: memoryConversationStore(),
    snapshots: memorySnapshotStore(),
    checkpoints: memoryCheckpointStore(),
    status: memoryStatusChannel(),
    deltas: memoryDeltaChannel(),
  };
}
