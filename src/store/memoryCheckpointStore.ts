import { assertConversationId } from './assertConversationId.ts';
import type { CheckpointRecord, CheckpointStore } from './checkpointStore.ts';

/** The in-memory twin of KvCheckpointStore; records kept as JSON, as the bucket keeps them. */
export class MemoryCheckpointStore implements CheckpointStore {
  readonly #records = new Map<string, Map<number, string>>();

  async put(record: CheckpointRecord): Promise<void> {
    assertConversationId(record.conversation_id);
    let ofConversation = this.#records.get(record.conversation_id);
    if (!ofConversation) this.#records.set(record.conversation_id, (ofConversation = new Map<number, string>()));
    ofConversation.set(record.seq, JSON.stringify(record));
  }

  async before(conversationId: string, seq: number): Promise<CheckpointRecord | undefined> {
    assertConversationId(conversationId);
    let best: number | undefined;
    for (const at of this.#records.get(conversationId)?.keys() ?? []) if (at < seq && (best ?? 0) < at) best = at;
    const json = best === undefined ? undefined : this.#records.get(conversationId)?.get(best);
    return json === undefined ? undefined : (JSON.parse(json) as CheckpointRecord);
  }

  async purge(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    this.#records.delete(conversationId);
  }

  /** How many checkpoints are kept (all conversations): tests check that reads write none. */
  get size(): number {
    let n = 0;
    for (const records of this.#records.values()) n += records.size;
    return n;
  }
}

export function memoryCheckpointStore(): MemoryCheckpointStore {
  return new MemoryCheckpointStore();
}
