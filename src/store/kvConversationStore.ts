import type { NatsConnection } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { openBucket, type Replication } from './streamSettings.ts';
import type { ZodType } from 'zod';
import { entryKey, isLegacyKey, MARKER_PREFIX, markerKey, userPrefix } from './conversationKeys.ts';
import { pageOf } from './conversationOrder.ts';
import {
  ConversationEntry,
  WorkMarker,
  type ConversationStore,
  type EntryPage,
  type ListPosition,
} from './conversationStore.ts';
import { LegacyRecord, migrateLegacyRecord } from './legacyConversationRecord.ts';
import { pullBytes } from './natsConnection.ts';
import { toStoreError } from './natsErrors.ts';
import { scanKv, type KvScanDeps } from './kvScan.ts';
import { OrderedConsumers } from './orderedConsumers.ts';

export const DEFAULT_CONVERSATION_BUCKET = 'tether_conversations';

export interface KvConversationStoreOptions extends Replication {
  /** KV bucket name (default `tether_conversations`). */
  bucket?: string;
}

/**
 * Conversation entries and work markers in one JetStream KV bucket (layout in
 * `conversationKeys.ts`), one revision kept. A user's list reads only the
 * keys under that user's prefix (one ordered consumer); an ownership check
 * is one get. The bucket can be written by anything on the NATS account, so
 * values are parsed with their schema on read: a value that does not match
 * makes the read fail rather than pass bad data in.
 */
export class KvConversationStore implements ConversationStore {
  readonly #kv: KV;
  readonly #scan: KvScanDeps;

  constructor(nc: NatsConnection, jsm: JetStreamManager, kv: KV, bucket: string) {
    this.#kv = kv;
    this.#scan = { consumers: new OrderedConsumers(nc), jsm, kv, bucket, maxBytes: pullBytes(nc) };
  }

  async put(entry: ConversationEntry): Promise<void> {
    await this.#put(entryKey(entry.user, entry.conversation_id), entry, `saving conversation ${entry.conversation_id}`);
  }

  async get(user: string, conversationId: string): Promise<ConversationEntry | undefined> {
    const key = entryKey(user, conversationId);
    const entry = await this.#get(key, ConversationEntry, `loading conversation ${conversationId}`);
    if (entry && (entry.conversation_id !== conversationId || entry.user !== user)) {
      throw new Error(`conversation entry ${key} names another conversation or user`);
    }
    return entry;
  }

  async list(user: string, page: { limit: number; after?: ListPosition }): Promise<EntryPage> {
    const prefix = userPrefix(user);
    const values = await this.#values(prefix, 'listing conversations');
    const entries = values.map(({ key, value }) => {
      const entry = parse(key, value, ConversationEntry);
      if (entry.user !== user || key !== prefix + entry.conversation_id) {
        throw new Error(`conversation entry ${key} names another conversation or user`);
      }
      return entry;
    });
    return pageOf(entries, page);
  }

  async delete(user: string, conversationId: string): Promise<void> {
    await this.#delete(entryKey(user, conversationId), `deleting conversation ${conversationId}`);
    await this.unmark(conversationId);
  }

  async mark(marker: WorkMarker): Promise<void> {
    await this.#put(markerKey(marker.conversation_id), marker, `marking conversation ${marker.conversation_id}`);
  }

  async unmark(conversationId: string): Promise<void> {
    await this.#delete(markerKey(conversationId), `unmarking conversation ${conversationId}`);
  }

  async markers(): Promise<WorkMarker[]> {
    const values = await this.#values(MARKER_PREFIX, 'listing open work');
    return values.map(({ key, value }) => {
      const marker = parse(key, value, WorkMarker);
      if (key !== MARKER_PREFIX + marker.conversation_id)
        throw new Error(`work marker ${key} names another conversation`);
      return marker;
    });
  }

  /**
   * Moves every record of the layout before the per-user index (key = the
   * conversation id) into it: an entry (its state unknown until recovery has
   * read the log once: `loading`) and an unsettled work marker, so the next
   * recovery reads its log once, brings it back if it was mid-task and
   * rewrites the entry from its log. Then the old key goes. Safe to repeat: an
   * entry already there is kept. Returns how many records moved.
   */
  async migrate(): Promise<number> {
    const keys: string[] = [];
    try {
      // Old keys are a single token; `*` matches only them.
      for await (const key of await this.#kv.keys('*')) if (isLegacyKey(key)) keys.push(key);
    } catch (err) {
      throw toStoreError(err, 'listing conversation records to migrate');
    }
    for (const key of keys) {
      const record = await this.#get(key, LegacyRecord, `migrating conversation ${key}`);
      if (record) {
        if (record.conversation_id !== key) throw new Error(`conversation record ${key} names another conversation`);
        const { entry, marker } = migrateLegacyRecord(record);
        if (!(await this.get(entry.user, entry.conversation_id))) await this.put(entry);
        await this.mark(marker);
      }
      await this.#delete(key, `migrating conversation ${key}`);
    }
    return keys.length;
  }

  async #put(key: string, value: unknown, doing: string): Promise<void> {
    try {
      await this.#kv.put(key, JSON.stringify(value));
    } catch (err) {
      throw toStoreError(err, doing);
    }
  }

  async #get<T>(key: string, schema: ZodType<T>, doing: string): Promise<T | undefined> {
    let found;
    try {
      found = await this.#kv.get(key);
    } catch (err) {
      throw toStoreError(err, doing);
    }
    if (found === null || found.operation !== 'PUT') return undefined;
    return parse(key, found.value, schema);
  }

  async #delete(key: string, doing: string): Promise<void> {
    try {
      await this.#kv.delete(key);
    } catch (err) {
      throw toStoreError(err, doing);
    }
  }

  async #values(prefix: string, doing: string) {
    try {
      return await scanKv(this.#scan, prefix);
    } catch (err) {
      throw toStoreError(err, doing);
    }
  }
}

function parse<T>(key: string, bytes: Uint8Array, schema: ZodType<T>): T {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(bytes));
  } catch (err) {
    throw new Error(`conversation bucket value ${key} is not JSON`, { cause: err });
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new Error(`conversation bucket value ${key} is invalid: ${parsed.error.message}`, { cause: parsed.error });
  }
  return parsed.data;
}

/**
 * Opens (creating when missing) the conversation bucket on `nc`, and moves
 * records of the old layout (one key per conversation id) into the per-user
 * index (see `KvConversationStore.migrate`).
 */
export async function kvConversationStore(
  nc: NatsConnection,
  options: KvConversationStoreOptions = {},
): Promise<KvConversationStore> {
  const bucket = options.bucket ?? DEFAULT_CONVERSATION_BUCKET;
  let store;
  try {
    const kv = await openBucket(nc, bucket, { replicas: options.replicas });
    store = new KvConversationStore(nc, await jetstreamManager(nc), kv, bucket);
  } catch (err) {
    throw toStoreError(err, 'opening the conversation bucket');
  }
  await store.migrate();
  return store;
}
