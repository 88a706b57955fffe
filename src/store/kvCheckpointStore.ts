import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { assertConversationId } from './assertConversationId.ts';
import { CheckpointRecord, type CheckpointStore } from './checkpointStore.ts';
import { toStoreError } from './natsErrors.ts';
import { openBucket, type Replication } from './streamSettings.ts';

export const DEFAULT_CHECKPOINT_BUCKET = 'tether_checkpoints';

/**
 * Checkpoints in a JetStream KV bucket, key `<conversation_id>.<seq>`. The
 * nearest one before a seq costs two requests: the stream's subjects under
 * the conversation (one stream info, no consumer), then one get. A value that
 * does not parse is treated as absent: the log is the truth.
 */
export class KvCheckpointStore implements CheckpointStore {
  readonly #kv: KV;
  readonly #jsm: JetStreamManager;
  readonly #bucket: string;

  constructor(kv: KV, jsm: JetStreamManager, bucket: string) {
    this.#kv = kv;
    this.#jsm = jsm;
    this.#bucket = bucket;
  }

  async put(record: CheckpointRecord): Promise<void> {
    assertConversationId(record.conversation_id);
    try {
      await this.#kv.put(`${record.conversation_id}.${record.seq}`, JSON.stringify(record));
    } catch (err) {
      throw toStoreError(err, `saving a checkpoint of ${record.conversation_id}`);
    }
  }

  async before(conversationId: string, seq: number): Promise<CheckpointRecord | undefined> {
    assertConversationId(conversationId);
    const prefix = `$KV.${this.#bucket}.${conversationId}.`;
    try {
      const info = await this.#jsm.streams.info(`KV_${this.#bucket}`, { subjects_filter: `${prefix}*` });
      let best = 0;
      for (const subject of Object.keys(info.state.subjects ?? {})) {
        const at = Number(subject.slice(prefix.length));
        if (Number.isSafeInteger(at) && at < seq && at > best) best = at;
      }
      if (best === 0) return undefined;
      const entry = await this.#kv.get(`${conversationId}.${best}`);
      if (entry === null || entry.operation !== 'PUT') return undefined;
      const parsed = CheckpointRecord.safeParse(entry.json());
      return parsed.success && parsed.data.conversation_id === conversationId && parsed.data.seq === best
        ? parsed.data
        : undefined;
    } catch (err) {
      if (err instanceof SyntaxError) return undefined;
      throw toStoreError(err, `reading the checkpoints of ${conversationId}`);
    }
  }

  async purge(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    try {
      await this.#jsm.streams.purge(`KV_${this.#bucket}`, { filter: `$KV.${this.#bucket}.${conversationId}.>` });
    } catch (err) {
      throw toStoreError(err, `purging the checkpoints of ${conversationId}`);
    }
  }
}

/** Opens (creating when missing) the checkpoint bucket on `nc`. */
export async function kvCheckpointStore(
  nc: NatsConnection,
  options: Replication & { bucket?: string } = {},
): Promise<KvCheckpointStore> {
  const bucket = options.bucket ?? DEFAULT_CHECKPOINT_BUCKET;
  try {
    const kv = await openBucket(nc, bucket, options);
    return new KvCheckpointStore(kv, await jetstreamManager(nc), bucket);
  } catch (err) {
    throw toStoreError(err, 'opening the checkpoint bucket');
  }
}
