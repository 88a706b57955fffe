import type { NatsConnection } from '@nats-io/transport-node';
import pLimit from 'p-limit';
import type { KV } from '@nats-io/kv';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { openBucket, type Replication } from './streamSettings.ts';
import { z, type ZodType } from 'zod';
import { ConversationId } from '../../protocol/index.ts';
import {
  DELETING_PREFIX,
  deletingKey,
  entryKey,
  isLegacyKey,
  MARKER_PREFIX,
  markerKey,
  runningKey,
} from './conversationKeys.ts';
import type { RunningEntry } from './conversationStore.ts';
import {
  ConversationEntry,
  DeleteRecord,
  WorkMarker,
  type ConversationStore,
  type EntryPage,
  type ListPosition,
} from './conversationStore.ts';
import { KvCas } from './kvCas.ts';
import { KvConversationOrder } from './kvConversationOrder.ts';
import { removeKey } from './kvRemove.ts';
import { InvalidValueError, parse } from './kvValues.ts';
import { LegacyRecord, migrateLegacyRecord } from './legacyConversationRecord.ts';
import { pullBytes } from './natsConnection.ts';
import { toStoreError } from './natsErrors.ts';
import { scanKv, type KvScanDeps } from './kvScan.ts';
import { enterOrder } from './kvOrderMigration.ts';
import { OrderedConsumers } from './orderedConsumers.ts';

/** Entry gets at once for one list page. */
const GET_CONCURRENCY = 16;

export const DEFAULT_CONVERSATION_BUCKET = 'tether_conversations';

export interface KvConversationStoreOptions extends Replication {
  /** KV bucket name (default `tether_conversations`). */
  bucket?: string;
}

/**
 * Conversation entries and work markers in one JetStream KV bucket (layout in
 * `conversationKeys.ts`), one revision kept. A user's list reads about one
 * page (`KvConversationOrder`), the running cap one key (the user's running set),
 * recovery the work markers and deletes under way; an ownership check is one
 * get. Removals purge the key's subject: no delete marker is left to grow
 * with every conversation that ever was. The bucket can be written by anything on the NATS account, so
 * values are parsed with their schema on read: a value that does not match
 * makes the read fail rather than pass bad data in.
 */
export class KvConversationStore implements ConversationStore {
  readonly #kv: KV;
  readonly #scan: KvScanDeps;
  readonly #order: KvConversationOrder;
  readonly #cas: KvCas;

  constructor(nc: NatsConnection, jsm: JetStreamManager, kv: KV, bucket: string) {
    this.#kv = kv;
    this.#scan = { consumers: new OrderedConsumers(nc), jsm, kv, bucket, maxBytes: pullBytes(nc) };
    this.#order = new KvConversationOrder(kv, jsm, bucket);
    this.#cas = new KvCas(kv);
  }

  async put(entry: ConversationEntry, was?: ConversationEntry): Promise<ConversationEntry> {
    const id = entry.conversation_id;
    const doing = `saving conversation ${id}`;
    let written = entry;
    if (entry.ordinal === undefined) {
      try {
        written = { ...entry, ordinal: await this.#order.enter(entry.user, id) };
      } catch (err) {
        throw toStoreError(err, doing);
      }
    }
    const running = isRunning(written);
    // Unchanged, or a new entry (not in the running set yet): nothing to write; unknown before (no `was`): maybe.
    const same =
      was !== undefined && isRunning(was) === running && (!running || was.running_since === written.running_since);
    const change = entry.ordinal === undefined ? running : !same;
    await Promise.all([
      this.#put(entryKey(entry.user, id), written, doing),
      change && this.#setRunning(entry.user, id, running ? written.running_since : undefined, doing),
    ]);
    return written;
  }

  async get(user: string, conversationId: string): Promise<ConversationEntry | undefined> {
    const key = entryKey(user, conversationId);
    const entry = await this.#get(key, ConversationEntry, `loading conversation ${conversationId}`);
    if (entry && (entry.conversation_id !== conversationId || entry.user !== user)) {
      throw new InvalidValueError(`conversation entry ${key} names another conversation or user`);
    }
    return entry;
  }

  async list(user: string, page: { limit: number; after?: ListPosition }): Promise<EntryPage> {
    const resolve = (ids: string[]) => {
      const get = pLimit(GET_CONCURRENCY);
      return Promise.all(ids.map((id) => get(() => this.get(user, id))));
    };
    try {
      return await this.#order.page(user, page.limit, page.after?.ordinal, resolve);
    } catch (err) {
      throw toStoreError(err, 'listing conversations');
    }
  }

  async running(user: string): Promise<RunningEntry[]> {
    let read;
    try {
      read = await this.#cas.read(runningKey(user), RunningSet);
    } catch (err) {
      throw toStoreError(err, 'reading the running conversations');
    }
    return Object.entries(read?.value.running ?? {}).map(([id, since]) => ({
      conversation_id: id,
      running_since: since,
    }));
  }

  /** Adds the conversation to its user's running set (`since`), or takes it out (undefined). */
  async #setRunning(user: string, conversationId: string, since: number | undefined, doing: string): Promise<void> {
    try {
      await this.#cas.change(
        runningKey(user),
        RunningSet,
        (set) => {
          const { [conversationId]: had, ...others } = set?.running ?? {};
          if (had === since) return null;
          return { running: since === undefined ? others : { ...others, [conversationId]: since } };
        },
        // A session's turn waits for it: made again when no answer comes (a bucket whose leader moved).
        { idempotent: true },
      );
    } catch (err) {
      throw toStoreError(err, doing);
    }
  }

  async delete(user: string, conversationId: string): Promise<void> {
    const doing = `deleting conversation ${conversationId}`;
    // An entry that does not parse is removed all the same (its place, if any, goes once stale);
    // a store that does not answer fails the delete, which is done again.
    const entry = await this.get(user, conversationId).catch((err: unknown) => {
      if (!(err instanceof InvalidValueError)) throw err;
      return undefined;
    });
    try {
      if (entry?.ordinal !== undefined) await this.#order.leave(user, conversationId, entry.ordinal);
    } catch (err) {
      throw toStoreError(err, doing);
    }
    await this.#setRunning(user, conversationId, undefined, doing);
    await this.#remove(entryKey(user, conversationId), doing);
    await this.unmark(conversationId);
  }

  async beginDelete(record: DeleteRecord): Promise<void> {
    const id = record.conversation_id;
    await this.#put(deletingKey(id), record, `recording the delete of ${id}`);
  }

  async deletions(): Promise<DeleteRecord[]> {
    const values = await this.#values(DELETING_PREFIX, 'listing deletes under way');
    return values.map(({ key, value }) => {
      const record = parse(key, value, DeleteRecord);
      if (key !== DELETING_PREFIX + record.conversation_id)
        throw new Error(`delete record ${key} names another conversation`);
      return record;
    });
  }

  async endDelete(conversationId: string): Promise<void> {
    await this.#remove(deletingKey(conversationId), `ending the delete of ${conversationId}`);
  }

  async mark(marker: WorkMarker): Promise<void> {
    await this.#put(markerKey(marker.conversation_id), marker, `marking conversation ${marker.conversation_id}`);
  }

  async unmark(conversationId: string): Promise<void> {
    await this.#remove(markerKey(conversationId), `unmarking conversation ${conversationId}`);
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
    return keys.length + (await enterOrder(this.#kv, this.#scan, (entry) => this.put(entry)));
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

  async #remove(key: string, doing: string, throughRevision?: number): Promise<void> {
    try {
      await removeKey(this.#kv, key, throughRevision);
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

/** The user's running set: conversation id → running since (epoch ms). */
const RunningSet = z.object({ running: z.record(ConversationId, z.number().int()) });

/** Whether the entry is in its user's running set: it runs in some node's memory (one passivated while running does not). */
function isRunning(entry: ConversationEntry): boolean {
  return entry.state === 'running' && entry.in_memory && entry.running_since !== undefined;
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
    // Read from the leader: a replica that is behind would not know an entry just written (a 404 after the
    // creation, and recovery purges a conversation whose marker has no entry).
    const kv = await openBucket(nc, bucket, { replicas: options.replicas, leaderReads: true });
    store = new KvConversationStore(nc, await jetstreamManager(nc), kv, bucket);
  } catch (err) {
    throw toStoreError(err, 'opening the conversation bucket');
  }
  await store.migrate();
  return store;
}
