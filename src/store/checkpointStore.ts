import { SnapshotRecord } from './snapshotStore.ts';

/** A checkpoint: the state of a conversation through one of its events (`seq`), as a snapshot record keeps it. */
export const CheckpointRecord = SnapshotRecord;
export type CheckpointRecord = SnapshotRecord;

/**
 * Checkpoints of each conversation's state, kept by stream sequence, so a
 * look at the state after any event folds from the nearest one before it
 * instead of from the creation. The owner writes one every
 * TETHER_CHECKPOINT_EVERY events as it appends; reads never write one.
 * Implementations: `kvCheckpointStore` (JetStream KV, bucket
 * `tether_checkpoints`, key `<conversation_id>.<seq>`) and
 * `memoryCheckpointStore`; both pass test/store/checkpointStoreContract.ts.
 */
export interface CheckpointStore {
  put(record: CheckpointRecord): Promise<void>;
  /** The conversation's checkpoint with the greatest seq below `seq`, undefined when it has none. */
  before(conversationId: string, seq: number): Promise<CheckpointRecord | undefined>;
  /** Removes every checkpoint of the conversation. */
  purge(conversationId: string): Promise<void>;
}
