import { assertConversationId } from './assertConversationId.ts';
import { sortRecords } from './conversationOrder.ts';
import type { ConversationRecord, ConversationStore } from './conversationStore.ts';

/**
 * The in-memory twin of KvConversationStore. Records are kept as JSON, as the
 * bucket keeps them, so a caller mutating a record it put or got changes nothing.
 */
export class MemoryConversationStore implements ConversationStore {
  readonly #records = new Map<string, string>();

  async put(record: ConversationRecord): Promise<void> {
    assertConversationId(record.conversation_id);
    this.#records.set(record.conversation_id, JSON.stringify(record));
  }

  async get(conversationId: string): Promise<ConversationRecord | undefined> {
    assertConversationId(conversationId);
    const json = this.#records.get(conversationId);
    return json === undefined ? undefined : (JSON.parse(json) as ConversationRecord);
  }

  async list(): Promise<ConversationRecord[]> {
    return sortRecords([...this.#records.values()].map((json) => JSON.parse(json) as ConversationRecord));
  }

  async delete(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    this.#records.delete(conversationId);
  }
}

export function memoryConversationStore(): MemoryConversationStore {
  return new MemoryConversationStore();
}
