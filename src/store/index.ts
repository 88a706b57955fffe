// The store's public surface. Only src/store imports @nats-io/*; callers get
// the NatsConnection type from here.
export type { NatsConnection } from '@nats-io/transport-node';

export type {
  AppendOptions,
  AppendResult,
  EventLog,
  FollowHandlers,
  LogFollower,
  LogSubscriber,
  LogSubscription,
  ReadOptions,
  ReadPage,
} from './eventLog.ts';
export { memoryStatusChannel, natsStatusChannel, type StatusChannel } from './statusChannel.ts';
export {
  memoryDeltaChannel,
  natsDeltaChannel,
  deltaFrom,
  isDeltaFrame,
  type DeltaChannel,
  type DeltaMessage,
} from './deltaChannel.ts';
export {
  ConversationEntry,
  DeleteRecord,
  RunningEntry,
  WorkMarker,
  type ConversationStore,
  type EntryPage,
  type ListPosition,
} from './conversationStore.ts';
export { SecretsUnsealError, StoreSettingsError, StoreUnavailableError, VersionConflictError } from './errors.ts';
export { passesWithTime } from './natsErrors.ts';
export { openBucket, reconcileStream, type BucketOptions, type Replication } from './streamSettings.ts';

export { DUPLICATE_WINDOW_MS } from './eventLogRules.ts';
export {
  connectNats,
  withoutPassword,
  type NatsAuth,
  natsAnswers,
  watchConnection,
  ensureEventStream,
  subjectFor,
  DEFAULT_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  type ConnectNatsOptions,
  type EventStreamOptions,
} from './natsConnection.ts';
export { JetStreamEventLog, jetStreamEventLog, type JetStreamEventLogOptions } from './jetStreamEventLog.ts';
export { MemoryEventLog, memoryEventLog, type MemoryEventLogOptions } from './memoryEventLog.ts';
export { firstAnswer, type AttemptSchedule } from './firstAnswer.ts';
export { DEFAULT_TAIL_LIMITS, type TailLimits } from './logTail.ts';
export {
  KvConversationStore,
  kvConversationStore,
  DEFAULT_CONVERSATION_BUCKET,
  type KvConversationStoreOptions,
} from './kvConversationStore.ts';
export { MemoryConversationStore, memoryConversationStore } from './memoryConversationStore.ts';
export { locateNatsServer, NatsServerNotFoundError, INSTALL_NATS_SERVER } from './natsBinary.ts';
export {
  startEmbeddedNats,
  type EmbeddedNats,
  type EmbeddedNatsExit,
  type EmbeddedNatsOptions,
} from './embeddedNats.ts';
export { SnapshotRecord, type SnapshotStore } from './snapshotStore.ts';
export { CheckpointRecord, type CheckpointStore } from './checkpointStore.ts';
export { KvCheckpointStore, kvCheckpointStore, DEFAULT_CHECKPOINT_BUCKET } from './kvCheckpointStore.ts';
export { MemoryCheckpointStore, memoryCheckpointStore } from './memoryCheckpointStore.ts';
export {
  jetStreamStores,
  memoryStores,
  type Stores,
  type JetStreamStoreNames,
  type JetStreamStoreOptions,
} from './stores.ts';
export { KvSnapshotStore, kvSnapshotStore, DEFAULT_SNAPSHOT_BUCKET } from './kvSnapshotStore.ts';
export { MemorySnapshotStore, memorySnapshotStore } from './memorySnapshotStore.ts';
export {
  KvClusterStore,
  kvClusterStore,
  memoryClusterStore,
  OwnerRecord,
  NodeBeat,
  DEFAULT_NODES_BUCKET,
  DEFAULT_OWNERS_BUCKET,
  type ClusterStore,
  type KvClusterStoreOptions,
  type NodeView,
  type OwnerRead,
} from './clusterStore.ts';
export {
  NodeUnreachableError,
  natsClusterBus,
  memoryClusterBus,
  DEFAULT_NODE_SUBJECT_PREFIX,
  type ClusterBus,
} from './clusterBus.ts';
export type { SecretStore } from './secretStore.ts';
export { parseSecretsKey, seal, unseal } from './secretSeal.ts';
export { KvSecretStore, kvSecretStore, DEFAULT_SECRET_BUCKET, type KvSecretStoreOptions } from './kvSecretStore.ts';
export { MemorySecretStore, memorySecretStore } from './memorySecretStore.ts';
