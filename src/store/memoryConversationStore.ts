import { entryKey, MARKER_PREFIX, markerKey, userPrefix } from './conversationKeys.ts';
import { pageOf } from './conversationOrder.ts';
import type { ConversationEntry, ConversationStore, EntryPage, ListPosition, WorkMarker } from './conversationStore.ts';

/**
 * The in-memory twin of KvConversationStore, with the same key layout. Values
 * are kept as JSON, as the bucket keeps them, so a caller mutating a value it
 * put or got changes nothing.
 */
export class MemoryConversationStore implements ConversationStore {
  readonly #keys = new Map<string, string>();

  async put(entry: ConversationEntry): Promise<void> {
    this.#keys.set(entryKey(entry.user, entry.conversation_id), JSON.stringify(entry));
  }

  async get(user: string, conversationId: string): Promise<ConversationEntry | undefined> {
    const json = this.#keys.get(entryKey(user, conversationId));
    return json === undefined ? undefined : (JSON.parse(json) as ConversationEntry);
  }

  async list(user: string, page: { limit: number; after?: ListPosition }): Promise<EntryPage> {
    const prefix = userPrefix(user);
    const entries = [...this.#keys].flatMap(([key, json]) =>
      key.startsWith(prefix) ? [JSON.parse(json) as ConversationEntry] : [],
    );
    return pageOf(entries, page);
  }

  async delete(user: string, conversationId: string): Promise<void> {
    this.#keys.delete(entryKey(user, conversationId));
    this.#keys.delete(markerKey(conversationId));
  }

  async mark(marker: WorkMarker): Promise<void> {
    this.#keys.set(markerKey(marker.conversation_id), JSON.stringify(marker));
  }

  async unmark(conversationId: string): Promise<void> {
    this.#keys.delete(markerKey(conversationId));
  }

  async markers(): Promise<WorkMarker[]> {
    return [...this.#keys].flatMap(([key, json]) =>
      key.startsWith(MARKER_PREFIX) ? [JSON.parse(json) as WorkMarker] : [],
    );
  }
}

export function memoryConversationStore(): MemoryConversationStore {
  return new MemoryConversationStore();
}
