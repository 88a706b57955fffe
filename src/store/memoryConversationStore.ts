import { DELETING_PREFIX, deletingKey, entryKey, MARKER_PREFIX, markerKey, userPrefix } from './conversationKeys.ts';
import type {
  ConversationEntry,
  ConversationStore,
  DeleteRecord,
  EntryPage,
  ListPosition,
  RunningEntry,
  WorkMarker,
} from './conversationStore.ts';

/**
 * The in-memory twin of KvConversationStore, with the same key layout. Values
 * are kept as JSON, as the bucket keeps them, so a caller mutating a value it
 * put or got changes nothing. Reads scan the map: the bounds on reads are the
 * bucket's business.
 */
export class MemoryConversationStore implements ConversationStore {
  readonly #keys = new Map<string, string>();
  readonly #counters = new Map<string, number>();

  async put(entry: ConversationEntry): Promise<ConversationEntry> {
    const ordinal = entry.ordinal ?? this.#counters.get(entry.user) ?? 0;
    if (entry.ordinal === undefined) this.#counters.set(entry.user, ordinal + 1);
    const written = { ...entry, ordinal };
    this.#keys.set(entryKey(entry.user, entry.conversation_id), JSON.stringify(written));
    return JSON.parse(JSON.stringify(written)) as ConversationEntry;
  }

  async get(user: string, conversationId: string): Promise<ConversationEntry | undefined> {
    const json = this.#keys.get(entryKey(user, conversationId));
    return json === undefined ? undefined : (JSON.parse(json) as ConversationEntry);
  }

  async list(user: string, page: { limit: number; after?: ListPosition }): Promise<EntryPage> {
    const after = page.after?.ordinal ?? Infinity;
    const entries = this.#entries(user)
      .filter((e) => (e.ordinal ?? 0) < after)
      .sort((a, b) => (b.ordinal ?? 0) - (a.ordinal ?? 0));
    return { items: entries.slice(0, page.limit), more: entries.length > page.limit };
  }

  async running(user: string): Promise<RunningEntry[]> {
    return this.#entries(user).flatMap(({ conversation_id, state, in_memory, running_since }) =>
      state === 'running' && in_memory && running_since !== undefined ? [{ conversation_id, running_since }] : [],
    );
  }

  async delete(user: string, conversationId: string): Promise<void> {
    this.#keys.delete(entryKey(user, conversationId));
    this.#keys.delete(markerKey(conversationId));
  }

  async beginDelete(record: DeleteRecord): Promise<void> {
    this.#keys.set(deletingKey(record.conversation_id), JSON.stringify(record));
  }

  async deletions(): Promise<DeleteRecord[]> {
    return this.#values<DeleteRecord>(DELETING_PREFIX);
  }

  async endDelete(conversationId: string): Promise<void> {
    this.#keys.delete(deletingKey(conversationId));
  }

  async mark(marker: WorkMarker): Promise<void> {
    this.#keys.set(markerKey(marker.conversation_id), JSON.stringify(marker));
  }

  async unmark(conversationId: string): Promise<void> {
    this.#keys.delete(markerKey(conversationId));
  }

  async markers(): Promise<WorkMarker[]> {
    return this.#values<WorkMarker>(MARKER_PREFIX);
  }

  #entries(user: string): ConversationEntry[] {
    return this.#values<ConversationEntry>(userPrefix(user));
  }

  #values<T>(prefix: string): T[] {
    return [...this.#keys].flatMap(([key, json]) => (key.startsWith(prefix) ? [JSON.parse(json) as T] : []));
  }
}

export function memoryConversationStore(): MemoryConversationStore {
  return new MemoryConversationStore();
}
