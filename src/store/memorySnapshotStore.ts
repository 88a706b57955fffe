import { assertConversationId } from './assertConversationId.ts';
import type { SnapshotRecord, SnapshotStore } from './snapshotStore.ts';

/** The in-memory twin of KvSnapshotStore; records kept as JSON, as the bucket keeps them. */
export class MemorySnapshotStore implements SnapshotStore {
  readonly #records = new Map<string, string>();

  async put(record: SnapshotRecord): Promise<void> {
    assertConversationId(record.conversation_id);
    this.#records.set(record.conversation_id, JSON.stringify(record));
  }

  async get(conversationId: string): Promise<SnapshotRecord | undefined> {
    assertConversationId(conversationId);
    const json = this.#records.get(conversationId);
    return json === undefined ? undefined : (JSON.parse(json) as SnapshotRecord);
  }

  async delete(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    this.#records.delete(conversationId);
  }
}

export function memorySnapshotStore(): MemorySnapshotStore {
  return new MemorySnapshotStore();
}
