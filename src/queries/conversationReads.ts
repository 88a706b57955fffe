import pLimit from 'p-limit';
import {
  agentStateOf,
  SESSION_MACHINE_VERSION,
  stateAt,
  type FoldStart,
  type SessionSnapshot,
} from '../../machines/index.ts';
import type {
  AgentState,
  ConversationInfo,
  ConversationState,
  ConversationSummary,
  ListPosition,
  LoggedEvent,
} from '../../protocol/index.ts';
import type {
  CheckpointStore,
  ConversationEntry,
  ConversationStore,
  EventLog,
  ReadPage,
  SnapshotStore,
} from '../store/index.ts';
import { BadSeqError, ConversationNotFoundError } from '../errors.ts';
import { readStoredState, snapshotFrom } from '../conversation/storedState.ts';
import type { Session } from '../conversation/session.ts';

/** Log reads at once when a list page asks each conversation's last sequence. */
const LIST_CONCURRENCY = 16;
/** Events per log read while folding up to a past event. */
const SEEK_PAGE = 500;

export interface ReadDeps {
  log: EventLog;
  conversations: ConversationStore;
  snapshots: SnapshotStore;
  checkpoints: CheckpointStore;
}

/** Where a client's connection starts: the conversation's state as of its last stored event. */
export interface ConnectPoint {
  state: AgentState;
  /** The stream sequence of the last stored event (0: none). */
  throughSeq: number;
}

/** One page of a user's conversations; `next` is where the next page starts, null at the end. */
export interface ConversationPage {
  items: ConversationSummary[];
  next: ListPosition | null;
}

/** A conversation's state as its log has it, read without waking it. */
export interface Peek {
  snapshot: SessionSnapshot;
  throughSeq: number;
  /** Whether it came from a session in this process's memory. */
  live: boolean;
}

/**
 * The read side of the actor host: the list, a conversation's info, its
 * events. Reads never wake a conversation: they use the session in memory
 * when there is one, and otherwise the index and a pure fold of the
 * snapshot and the log, storing nothing and bringing nothing into memory.
 */
export class ConversationReads {
  readonly #deps: ReadDeps;
  readonly #live: (conversationId: string) => Session | undefined;

  constructor(deps: ReadDeps, live: (conversationId: string) => Session | undefined) {
    this.#deps = deps;
    this.#live = live;
  }

  /**
   * One page of the user's conversations, newest first, from the user's index
   * (no other user's entries are read, no session is rehydrated); `last_seq` is
   * read from the log now, one direct get per item.
   */
  async list(user: string, page: { limit: number; after?: ListPosition }): Promise<ConversationPage> {
    const { items, more } = await this.#deps.conversations.list(user, page);
    const read = pLimit(LIST_CONCURRENCY);
    const summaries = await Promise.all(
      items.map(({ running_since: _, ordinal: __, ...entry }) =>
        read(async () => ({
          ...entry,
          // This process knows what it holds; the entry's flag may be left over from a process that died.
          in_memory: this.#isLive(entry.conversation_id),
          last_seq: await this.#deps.log.lastSeq(entry.conversation_id),
        })),
      ),
    );
    const last = items.at(-1);
    return {
      items: summaries,
      next: more && last ? { ordinal: last.ordinal ?? 0, conversation_id: last.conversation_id } : null,
    };
  }

  /** A conversation as it stands. */
  async info(conversationId: string, user: string): Promise<Omit<ConversationInfo, 'owner' | 'sandbox'>> {
    const { created_at } = await this.entryOf(conversationId, user);
    const { snapshot, throughSeq, live } = await this.peek(conversationId);
    return {
      conversation_id: conversationId,
      user,
      created_at,
      state: agentStateOf(snapshot),
      runtime_status: snapshot.context.runtime,
      in_memory: live,
      last_seq: throughSeq,
      forked_from: forkedFrom(snapshot),
    };
  }

  /**
   * The conversation right after its event at `atSeq` (default: its last
   * event): a pure fold from the nearest checkpoint before it (or from the
   * creation), reading only the events up to it. Nothing runs, nothing is
   * stored, nothing is rehydrated. BadSeqError when `atSeq` is not one of its events.
   */
  async stateAt(conversationId: string, user: string, atSeq?: number): Promise<ConversationState> {
    await this.entryOf(conversationId, user);
    if (atSeq !== undefined && !(Number.isSafeInteger(atSeq) && atSeq >= 1))
      throw new BadSeqError(conversationId, atSeq);
    const seq = atSeq ?? (await this.#deps.log.lastSeq(conversationId));
    if (seq === 0) throw new ConversationNotFoundError(conversationId);
    const { events, start } = await this.eventsUpTo(conversationId, seq);
    const found = stateAt(events, seq, start);
    if (!found) throw new BadSeqError(conversationId, seq);
    return { ...found, context: { ...found.context } };
  }

  /**
   * The conversation's events after its nearest checkpoint before `seq` (of
   * this machine version; from the creation without one) through `seq`, and
   * that checkpoint's state.
   */
  async eventsUpTo(conversationId: string, seq: number): Promise<{ events: LoggedEvent[]; start?: FoldStart }> {
    const checkpoint = await this.#deps.checkpoints.before(conversationId, seq);
    const snapshot =
      checkpoint && checkpoint.machine_version === SESSION_MACHINE_VERSION ? snapshotFrom(checkpoint) : undefined;
    const start = checkpoint && snapshot ? { seq: checkpoint.seq, snapshot } : undefined;
    const events: LoggedEvent[] = [];
    for (let afterSeq = start?.seq ?? 0; ;) {
      // No more of its events than stream sequences lie between: a page never reads far past `seq`.
      const page = await this.#deps.log.read(conversationId, { afterSeq, limit: Math.min(SEEK_PAGE, seq - afterSeq) });
      for (const item of page.items) {
        if (item.seq > seq) return { events, ...(start && { start }) };
        events.push(item);
      }
      const last = page.items.at(-1);
      if (!page.hasMore || last === undefined || last.seq >= seq) return { events, ...(start && { start }) };
      afterSeq = last.seq;
    }
  }

  async events(conversationId: string, user: string, page: { afterSeq: number; limit: number }): Promise<ReadPage> {
    await this.entryOf(conversationId, user);
    return this.#deps.log.read(conversationId, page);
  }

  #isLive(conversationId: string): boolean {
    const live = this.#live(conversationId);
    return live !== undefined && !live.released;
  }

  /** The user's index entry of the conversation; another user's is as unknown as a missing one. */
  async entryOf(conversationId: string, user: string): Promise<ConversationEntry> {
    const entry = await this.#deps.conversations.get(user, conversationId);
    if (!entry) throw new ConversationNotFoundError(conversationId);
    return entry;
  }

  /**
   * The state of a conversation as its log has it: the live session's, or a
   * pure fold of its snapshot and the events after it (no effect runs,
   * nothing is stored, nothing stays in memory).
   */
  async peek(conversationId: string): Promise<Peek> {
    const live = this.#live(conversationId);
    if (live && !live.released && live.snapshot) {
      return { snapshot: live.snapshot, throughSeq: live.lastSeq, live: true };
    }
    const stored = await readStoredState(this.#deps.log, this.#deps.snapshots, conversationId);
    if (!stored) throw new ConversationNotFoundError(conversationId);
    const { snapshot, lastSeq } = stored.state;
    return { snapshot, throughSeq: lastSeq, live: false };
  }
}

/** Where a fork came from, as its log says. */
function forkedFrom(snapshot: SessionSnapshot): ConversationInfo['forked_from'] {
  const from = snapshot.context.forkedFrom;
  return from ? { conversation_id: from.conversationId, seq: from.seq } : null;
}
