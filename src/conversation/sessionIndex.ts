import type { SessionSnapshot } from '../../machines/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { StoreUnavailableError, type ConversationEntry, type ConversationStore } from '../store/index.ts';
import {
  comesBack,
  entryOfFold,
  markerAfterApply,
  markerBeforeAppend,
  projectEntries,
  type Marker,
} from './conversationIndex.ts';

/** What a session tells the projections about each decision; both calls are awaited inside its mailbox job. */
export interface SessionIndexHook {
  /** Before the decision's events are appended. A rejection stores nothing. */
  beforeAppend(before: SessionSnapshot | undefined, events: readonly StoredEvent[]): Promise<void>;
  /** After they were appended and applied, before the caller is answered. Rejects only when a new conversation's record was not written. */
  afterApply(before: SessionSnapshot | undefined, events: readonly StoredEvent[]): Promise<void>;
}

/**
 * Keeps one live conversation's index entry and work marker in step with its
 * log: the entry is the projection of the decision's events (`projectEntry`)
 * from the entry before it, and is written only when it changes or when the
 * conversation comes into memory (created, rehydrated: then it starts from
 * the state its log folds to, which repairs an entry that lagged).
 *
 * The crash rule (`markerBeforeAppend`, `markerAfterApply`): the marker is
 * made unsettled before an append that may make the conversation busy or
 * change its agent state, and settled (or removed, on passivation) only after
 * the entry holds the new state. A process that dies between the two leaves a
 * marker that says too much, never too little; recovery reads that one log
 * and repairs it.
 */
export class SessionIndex implements SessionIndexHook {
  readonly #conversationId: string;
  readonly #store: ConversationStore;
  readonly #logger: Logger;
  /** The stored entry (or a fork's copied part) the first decision projects from. */
  readonly #known: ConversationEntry | undefined;
  /** What this session last wrote (a fresh one knows nothing: its first decision writes). */
  #marker: Marker = 'absent';
  #entry: ConversationEntry | undefined;

  constructor(conversationId: string, store: ConversationStore, logger: Logger, known?: ConversationEntry) {
    this.#conversationId = conversationId;
    this.#store = store;
    this.#logger = logger;
    this.#known = known;
  }

  async beforeAppend(before: SessionSnapshot | undefined, events: readonly StoredEvent[]): Promise<void> {
    const prior = this.#prior(before, events);
    const after = projectEntries(prior, events);
    const needed = markerBeforeAppend(this.#marker, prior, after, events);
    if (after === undefined || needed === null) return;
    await this.#store.mark({
      conversation_id: this.#conversationId,
      user: after.user,
      unsettled: needed === 'unsettled',
    });
    this.#marker = needed;
  }

  async afterApply(before: SessionSnapshot | undefined, events: readonly StoredEvent[]): Promise<void> {
    const entry = projectEntries(this.#prior(before, events), events);
    // A conversation that ended is being deleted: its entry and marker go with it.
    if (entry === undefined) return;
    try {
      if (comesBack(events) || !sameEntry(entry, this.#entry)) {
        // The store gives a new entry its place in the user's order: the written entry carries it on.
        this.#entry = await this.#store.put(entry, this.#entry);
      }
      const marker = markerAfterApply(this.#marker, entry, events);
      if (marker === 'unmark') {
        await this.#store.unmark(this.#conversationId);
        this.#marker = 'absent';
      } else if (marker === 'settle') {
        await this.#store.mark({ conversation_id: this.#conversationId, user: entry.user, unsettled: false });
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

  /** The entry a decision's events project from; coming back into memory, the one its log folds to. */
  #prior(before: SessionSnapshot | undefined, events: readonly StoredEvent[]): ConversationEntry | undefined {
    const base = this.#entry ?? this.#known;
    const rehydrated = events.some((e) => e.type === 'session_rehydrated');
    return before && base && rehydrated ? entryOfFold(base, before) : base;
  }
}

function isNew(events: readonly StoredEvent[]): boolean {
  return events.some((e) => e.type === 'conversation_created' || e.type === 'conversation_forked');
}

function sameEntry(a: ConversationEntry, b: ConversationEntry | undefined): boolean {
  return (
    b !== undefined &&
    a.state === b.state &&
    a.in_memory === b.in_memory &&
    a.user === b.user &&
    a.created_at === b.created_at &&
    a.running_since === b.running_since
  );
}
