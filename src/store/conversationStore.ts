import { z } from 'zod';
import { AgentState, ConversationId, type ListPosition } from '../../protocol/index.ts';

export type { ListPosition };

/**
 * One conversation in its user's index: what the list answers without
 * reading the log (only `last_seq` comes from the log, at answer time).
 */
export const ConversationEntry = z.object({
  conversation_id: ConversationId,
  user: z.string().min(1),
  created_at: z.iso.datetime(),
  /** The agent state of the conversation's last state fact (kept while it is out of memory). */
  state: AgentState,
  in_memory: z.boolean(),
  /** While `state` is running: since when (epoch ms, a stored event's time); the per-user cap sends the oldest out first. */
  running_since: z.number().int().optional(),
});
export type ConversationEntry = z.infer<typeof ConversationEntry>;

/**
 * The index of open work recovery reads instead of every log. A conversation
 * has a marker while it is in memory somewhere or its log may say it is busy.
 * `unsettled` over-approximates: it is set before an append that may make the
 * conversation busy or change its agent state, and cleared only once the
 * entry holds that state and the state is not busy. Recovery reads the log of
 * unsettled conversations only.
 */
export const WorkMarker = z.object({
  conversation_id: ConversationId,
  user: z.string().min(1),
  unsettled: z.boolean(),
});
export type WorkMarker = z.infer<typeof WorkMarker>;

export interface EntryPage {
  /** Newest first (ties: greater conversation id first). */
  items: ConversationEntry[];
  /** Whether entries follow the last item. */
  more: boolean;
}

/**
 * Conversation records as projections, kept apart from the log so listing
 * and recovery read no events: a per-user index of entries and an index of
 * open work. Users are separate: `get`, `list` and `delete` of one user
 * never see another's entries. Implementations: `kvConversationStore`
 * (JetStream KV) and `memoryConversationStore`; both pass
 * `test/store/conversationStoreContract.ts`.
 */
export interface ConversationStore {
  /** Creates or replaces the entry of `entry.user`'s conversation. */
  put(entry: ConversationEntry): Promise<void>;
  /** The user's entry, undefined when the user has no such conversation. */
  get(user: string, conversationId: string): Promise<ConversationEntry | undefined>;
  /** One page of the user's entries, newest first, after `after` when given. */
  list(user: string, page: { limit: number; after?: ListPosition }): Promise<EntryPage>;
  /** Removes the user's entry and the conversation's work marker; unknown ones are a no-op. */
  delete(user: string, conversationId: string): Promise<void>;
  /** Creates or replaces a conversation's work marker. */
  mark(marker: WorkMarker): Promise<void>;
  /** Removes a conversation's work marker; an unknown one is a no-op. */
  unmark(conversationId: string): Promise<void>;
  /** Every work marker, in no particular order. */
  markers(): Promise<WorkMarker[]>;
}
