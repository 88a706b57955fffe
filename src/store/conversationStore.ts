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
  /**
   * Its place in the user's creation order (0, 1, 2 …), which lists follow:
   * given by the store when the entry is first put, then carried by every rewrite.
   */
  ordinal: z.number().int().min(0).optional(),
});
export type ConversationEntry = z.infer<typeof ConversationEntry>;

/** One of a user's conversations whose entry says running in memory: all the per-user running cap reads. */
export const RunningEntry = z.object({ conversation_id: ConversationId, running_since: z.number().int() });
export type RunningEntry = z.infer<typeof RunningEntry>;

/** A delete under way: written before anything of the conversation goes, removed last. */
export const DeleteRecord = z.object({
  conversation_id: ConversationId,
  user: z.string().min(1),
  keep_workspace: z.boolean(),
});
export type DeleteRecord = z.infer<typeof DeleteRecord>;

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
  /** Newest first: the reverse of the user's creation order. */
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
 * `test/store/conversationStoreContract.ts`. Every read is bounded by what it
 * answers (a page, the running set, open work), never by how many
 * conversations the user has or had; a removal leaves nothing behind.
 */
export interface ConversationStore {
  /**
   * Creates or replaces the entry of `entry.user`'s conversation and returns
   * it as written. An entry without `ordinal` is new: it takes the user's next
   * place in the creation order. `was` (the entry as last written, when the
   * caller knows it) spares a write of the running set that would change nothing.
   */
  put(entry: ConversationEntry, was?: ConversationEntry): Promise<ConversationEntry>;
  /** The user's entry, undefined when the user has no such conversation. */
  get(user: string, conversationId: string): Promise<ConversationEntry | undefined>;
  /** One page of the user's entries, newest first (by creation), after `after` when given. */
  list(user: string, page: { limit: number; after?: ListPosition }): Promise<EntryPage>;
  /** The user's conversations whose entry says running in memory, in no particular order. */
  running(user: string): Promise<RunningEntry[]>;
  /** Removes the user's entry, its place in the order, its place in the running set and the conversation's work marker; unknown ones are a no-op. */
  delete(user: string, conversationId: string): Promise<void>;
  /** Records a delete under way (before anything of it goes). */
  beginDelete(record: DeleteRecord): Promise<void>;
  /** The deletes under way, in no particular order (recovery finishes them). */
  deletions(): Promise<DeleteRecord[]>;
  /** Removes the record of a finished delete. */
  endDelete(conversationId: string): Promise<void>;
  /** Creates or replaces a conversation's work marker. */
  mark(marker: WorkMarker): Promise<void>;
  /** Removes a conversation's work marker; an unknown one is a no-op. */
  unmark(conversationId: string): Promise<void>;
  /** Every work marker, in no particular order. */
  markers(): Promise<WorkMarker[]>;
}
