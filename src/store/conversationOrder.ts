import type { ConversationEntry, EntryPage, ListPosition } from './conversationStore.ts';

/** Newest first, ties by greater id first: the one order every ConversationStore lists in. */
export function newestFirst(a: ListPosition, b: ListPosition): number {
  const byId = (x: string, y: string) => (x < y ? 1 : x > y ? -1 : 0);
  return Date.parse(b.created_at) - Date.parse(a.created_at) || byId(a.conversation_id, b.conversation_id);
}

/** The page of `entries` (any order) that follows `after`, at most `limit` long. */
export function pageOf(entries: ConversationEntry[], page: { limit: number; after?: ListPosition }): EntryPage {
  const { after } = page;
  const sorted = entries.sort(newestFirst);
  const rest = after === undefined ? sorted : sorted.filter((e) => newestFirst(after, e) < 0);
  return { items: rest.slice(0, page.limit), more: rest.length > page.limit };
}
