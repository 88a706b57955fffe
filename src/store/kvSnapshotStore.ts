import type { NatsConnection } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';
import { assertConversationId } from './assertConversationId.ts';
import { removeKey } from './kvRemove.ts';
import { toStoreError } from './natsErrors.ts';
import { SnapshotRecord, type SnapshotStore } from './snapshotStore.ts';
import { openBucket, type Replication } from './streamSettings.ts';

export const DEFAULT_SNAPSHOT_BUCKET = 'tether_snapshots';

/**
 * Snapshots in a JetStream KV bucket, one key per conversation, one revision
 * kept. A value that does not parse is treated as absent: the log is the truth
 * and a full fold rebuilds the session.
 */
export class KvSnapshotStore implements SnapshotStore {
  readonly #kv: KV;

  constructor(kv: KV) {
    this.#kv = kv;
  }

  async put(record: SnapshotRecord): Promise<void> {
    assertConversationId(record.conversation_id);
    try {
      await this.#kv.put(record.conversation_id, JSON.stringify(record));
    } catch (err) {
      throw toStoreError(err, `saving the snapshot of ${record.conversation_id}`);
    }
  }

  async get(conversationId: string): Promise<SnapshotRecord | undefined> {
    assertConversationId(conversationId);
    let entry;
    try {
      entry = await this.#kv.get(conversationId);
    } catch (err) {
      throw toStoreError(err, `loading the snapshot of ${conversationId}`);
    }
    if (entry === null || entry.operation !== 'PUT') return undefined;
    let value: unknown;
    try {
      value = entry.json();
    } catch {
      return undefined;
    }
    const parsed = SnapshotRecord.safeParse(value);
    return parsed.success && parsed.data.conversation_id === conversationId ? parsed.data : undefined;
  }

  async delete(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    try {
      await removeKey(this.#kv, conversationId);
    } catch (err) {
      throw toStoreError(err, `deleting the snapshot of ${conversationId}`);
    }
  }
}

/** Opens (creating when missing) the snapshot bucket on `nc`. */
export async function kvSnapshotStore(
  nc: NatsConnection,
  options: Replication & { bucket?: string } = {},
): Promise<KvSnapshotStore> {
  try {
    return new KvSnapshotStore(await openBucket(nc, options.bucket ?? DEFAULT_SNAPSHOT_BUCKET, options));
  } catch (err) {
    throw toStoreError(err, 'opening the snapshot bucket');
  }
}
