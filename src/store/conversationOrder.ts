import type { ConversationRecord } from './conversationStore.ts';

/** Oldest first, ties by id: the one order every ConversationStore lists in. Sorts in place. */
export function sortRecords(records: ConversationRecord[]): ConversationRecord[] {
  const byId = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return records.sort(
    (a, b) => Date.parse(a.created_at) - Date.parse(b.created_at) || byId(a.conversation_id, b.conversation_id),
  );
}
