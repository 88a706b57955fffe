import { z } from 'zod';
import { ConversationId } from '../../protocol/index.ts';

/** A session's persisted snapshot and where in its log it stands. */
export const SnapshotRecord = z.object({
  conversation_id: ConversationId,
  /** The machine version that wrote it; another version's snapshot is ignored. */
  machine_version: z.number().int().min(1),
  /** Stream sequence of the last event folded into the snapshot. */
  seq: z.number().int().min(1),
  /** id the next event of the conversation gets. */
  next_event_id: z.number().int().min(0),
  /** XState's persisted snapshot (`getPersistedSnapshot()`), JSON. */
  snapshot: z.unknown(),
});
export type SnapshotRecord = z.infer<typeof SnapshotRecord>;

/**
 * The latest snapshot of each conversation. Implementations: `kvSnapshotStore`
 * (JetStream KV, bucket `tether_snapshots`) and `memorySnapshotStore`.
 */
export interface SnapshotStore {
  put(record: SnapshotRecord): Promise<void>;
  get(conversationId: string): Promise<SnapshotRecord | undefined>;
  delete(conversationId: string): Promise<void>;
}
