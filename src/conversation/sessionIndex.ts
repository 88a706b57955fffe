import { agentStateOf, BUSY_AGENT_STATES, isBusy, type SessionSnapshot } from '../../machines/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { StoreUnavailableError, type ConversationEntry, type ConversationStore } from '../store/index.ts';

/** What a session tells the projections about each decision; both calls are awaited inside its mailbox job. */
export interface SessionIndexHook {
  /** Before the decision's events are appended. A rejection stores nothing. */
  beforeAppend(
    before: SessionSnapshot | undefined,
    after: SessionSnapshot,
    events: readonly StoredEvent[],
  ): Promise<void>;
  /** After they were appended and applied, before the caller is answered. Rejects only when a new conversation's record was not written. */
  afterApply(after: SessionSnapshot, events: readonly StoredEvent[]): Promise<void>;
}

type Marker = 'absent' | 'settled' | 'unsettled';
const RANK: Record<Marker, number> = { absent: 0, settled: 1, unsettled: 2 };

/**
 * Keeps one live conversation's index entry and work marker in step with its
 * log, writing only on the events that change them: an agent state change,
 * coming into memory (created, rehydrated: the entry is rewritten from the
 * loaded state, which repairs an entry that lagged) and leaving it.
 *
 * The crash rule: the marker is made unsettled before an append that may make
 * the conversation busy or change its agent state, and settled (or removed,
 * on passivation) only after the entry holds the new state. A process that
 * dies between the two leaves a marker that says too much, never too little;
 * recovery reads that one log and repairs it.
 */
export class SessionIndex implements SessionIndexHook {
  readonly #conversationId: string;
  readonly #store: ConversationStore;
  readonly #logger: Logger;
  #createdAt: string | undefined;
  /** What this session last wrote (a fresh one knows nothing: its first decision writes). */
  #marker: Marker = 'absent';
  #entry: ConversationEntry | undefined;

  constructor(conversationId: string, store: ConversationStore, logger: Logger, known?: ConversationEntry) {
    this.#conversationId = conversationId;
    this.#store = store;
    this.#logger = logger;
    this.#createdAt = known?.created_at;
  }

  async beforeAppend(
    before: SessionSnapshot | undefined,
    after: SessionSnapshot,
    events: readonly StoredEvent[],
  ): Promise<void> {
    if (ends(events)) return;
    const changes = before === undefined || agentStateOf(before) !== agentStateOf(after);
    const needed: Marker = isBusy(after) || changes ? 'unsettled' : comesBack(events) ? 'settled' : 'absent';
    if (RANK[needed] <= RANK[this.#marker]) return;
    await this.#store.mark({
      conversation_id: this.#conversationId,
      user: after.context.user,
      unsettled: needed === 'unsettled',
    });
    this.#marker = needed;
  }

  async afterApply(after: SessionSnapshot, events: readonly StoredEvent[]): Promise<void> {
    // A conversation that ended is being deleted: its entry and marker go with it.
    if (ends(events)) return;
    const created = events.find((e) => e.type === 'conversation_created');
    if (created) this.#createdAt = created.ts;
    const passivated = events.find((e) => e.type === 'session_passivated');
    const user = after.context.user;
    // Out of memory the machine is in `passivated`; the event names the agent state it comes back in.
    const state = passivated ? passivated.data.state : agentStateOf(after);
    try {
      if (this.#createdAt === undefined) throw new Error('the creation time of the conversation is not known');
      const entry: ConversationEntry = {
        conversation_id: this.#conversationId,
        user,
        created_at: this.#createdAt,
        state,
        in_memory: passivated === undefined,
        ...(state === 'running' &&
          after.context.runningSince !== null && { running_since: after.context.runningSince }),
      };
      if (comesBack(events) || !sameEntry(entry, this.#entry)) {
        await this.#store.put(entry);
        this.#entry = entry;
      }
      if (passivated) {
        // Only a shutdown leaves busy work for recovery; any other passivation waits for an action.
        if (!(passivated.data.reason === 'shutdown' && BUSY_AGENT_STATES.has(state))) {
          await this.#store.unmark(this.#conversationId);
          this.#marker = 'absent';
        }
      } else if (this.#marker === 'unsettled' && !isBusy(after)) {
        await this.#store.mark({ conversation_id: this.#conversationId, user, unsettled: false });
        this.#marker = 'settled';
      }
    } catch (err) {
      // A new conversation exists for its user only once its record is: without it nothing could reach
      // it, and recovery would purge it. Its creation (or fork) fails instead, and is removed.
      if (this.#entry === undefined && isNew(events))
        throw new StoreUnavailableError(`the record of conversation ${this.#conversationId} was not written`, {
          cause: err,
        });
      // The events are stored: the answer stands. The marker still says unsettled, so recovery reads this log.
      this.#logger.warn('conversation index not updated', {
        conversation_id: this.#conversationId,
        ...errorFields(err),
      });
    }
  }
}

function ends(events: readonly StoredEvent[]): boolean {
  return events.some((e) => e.type === 'session_closed');
}

function isNew(events: readonly StoredEvent[]): boolean {
  return events.some((e) => e.type === 'conversation_created' || e.type === 'conversation_forked');
}

function comesBack(events: readonly StoredEvent[]): boolean {
  return events.some((e) => e.type === 'conversation_created' || e.type === 'session_rehydrated');
}

function sameEntry(a: ConversationEntry, b: ConversationEntry | undefined): boolean {
  return (
    b !== undefined &&
    a.state === b.state &&
    a.in_memory === b.in_memory &&
    a.user === b.user &&
    a.running_since === b.running_since
  );
}
