import type { NatsConnection } from '@nats-io/transport-node';
import { Kvm, type KV } from '@nats-io/kv';
import { StorageType } from '@nats-io/jetstream';
import { assertConversationId } from './assertConversationId.ts';
import { sortRecords } from './conversationOrder.ts';
import { ConversationRecord, type ConversationStore } from './conversationStore.ts';
import { toStoreError } from './natsErrors.ts';

export const DEFAULT_CONVERSATION_BUCKET = 'tether_conversations';

export interface KvConversationStoreOptions {
  /** KV bucket name (default `tether_conversations`). */
  bucket?: string;
}

/**
 * Conversation records in a JetStream KV bucket, one key per conversation id,
 * one revision kept. The bucket can be written by anything on the NATS
 * account, so values are parsed with the ConversationRecord schema on read:
 * a value that does not match makes the read fail rather than pass bad data in.
 */
export class KvConversationStore implements ConversationStore {
  readonly #kv: KV;

  constructor(kv: KV) {
    this.#kv = kv;
  }

  async put(record: ConversationRecord): Promise<void> {
    assertConversationId(record.conversation_id);
    try {
      await this.#kv.put(record.conversation_id, JSON.stringify(record));
    } catch (err) {
      throw toStoreError(err, `saving conversation ${record.conversation_id}`);
    }
  }

  async get(conversationId: string): Promise<ConversationRecord | undefined> {
    assertConversationId(conversationId);
    let entry;
    try {
      entry = await this.#kv.get(conversationId);
    } catch (err) {
      throw toStoreError(err, `loading conversation ${conversationId}`);
    }
    if (entry === null || entry.operation !== 'PUT') return undefined;
    return parseRecord(conversationId, entry.string());
  }

  async list(): Promise<ConversationRecord[]> {
    const keys: string[] = [];
    try {
      for await (const key of await this.#kv.keys()) keys.push(key);
    } catch (err) {
      throw toStoreError(err, 'listing conversations');
    }
    const records = await Promise.all(keys.map((key) => this.get(key)));
    // A key deleted between keys() and get() is simply gone.
    return sortRecords(records.filter((r): r is ConversationRecord => r !== undefined));
  }

  async delete(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    try {
      await this.#kv.delete(conversationId);
    } catch (err) {
      throw toStoreError(err, `deleting conversation ${conversationId}`);
    }
  }
}

function parseRecord(key: string, text: string): ConversationRecord {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`conversation record ${key} is not JSON`, { cause: err });
  }
  const parsed = ConversationRecord.safeParse(value);
  if (!parsed.success) {
    throw new Error(`conversation record ${key} is invalid: ${parsed.error.message}`, { cause: parsed.error });
  }
  if (parsed.data.conversation_id !== key) {
    throw new Error(`conversation record ${key} names another conversation (${parsed.data.conversation_id})`);
  }
  return parsed.data;
}

/** Opens (creating when missing) the conversation bucket on `nc`. */
export async function kvConversationStore(
  nc: NatsConnection,
  options: KvConversationStoreOptions = {},
): Promise<KvConversationStore> {
  try {
    const kv = await new Kvm(nc).create(options.bucket ?? DEFAULT_CONVERSATION_BUCKET, {
      history: 1,
      storage: StorageType.File,
    });
    return new KvConversationStore(kv);
  } catch (err) {
    throw toStoreError(err, 'opening the conversation bucket');
  }
}
