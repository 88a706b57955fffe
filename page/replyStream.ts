import type { StoredEvent } from '../protocol/index.ts';
import type { DeltaFrame } from '../src/client/index.ts';

/** What the provisional reply's bubble does next: pure data, applied to the DOM by `ReplyBubble`. */
export type ReplyChange =
  /** Show exactly `text` for this item and attempt (a new reply, or a newer attempt: the older text goes). */
  | { type: 'show'; itemId: string; attempt: number; text: string }
  /** The same attempt goes on: `text` follows what is shown. */
  | { type: 'append'; text: string }
  /** No provisional reply any more (its stored event came, or its step ended without one). */
  | { type: 'clear' };

interface Draft {
  itemId: string;
  attempt: number;
  /** The attempt's pieces by index; a piece ahead of a hole waits for it. */
  pieces: string[];
  /** How many pieces from index 0 are shown. */
  shown: number;
  /** Its step ended without a stored answer: the rest of this attempt is not shown. */
  closed: boolean;
}

/**
 * The reply being written, from `delta` frames, by the protocol client's rule
 * (its `delta` handler): deltas keyed by (item, attempt, index), each shown once
 * and in order (a reconnect sends the attempt again from index 0); a newer
 * attempt drops the older one's text; the stored event with the item's
 * `data.item_id` replaces them. One reply is written at a time: a delta of
 * another item means that one is being written now. Pure: no DOM, no clock.
 */
export class ReplyStream {
  #draft: Draft | null = null;
  /** Items that will show no more text: stored, or given up for a newer item. */
  readonly #ended = new Set<string>();

  /** A `delta` frame arrived. */
  delta({ item_id: itemId, attempt, index, text }: DeltaFrame): ReplyChange | null {
    const found = this.#draftFor(itemId, attempt);
    if (!found) return null;
    const { draft, restart } = found;
    if (index < draft.shown || draft.pieces[index] !== undefined) return null;
    draft.pieces[index] = text;
    const before = draft.shown;
    let added = '';
    for (let piece = draft.pieces[draft.shown]; piece !== undefined; piece = draft.pieces[draft.shown]) {
      added += piece;
      draft.shown += 1;
    }
    if (restart || (before === 0 && added !== '')) return { type: 'show', itemId, attempt, text: added };
    return added === '' ? null : { type: 'append', text: added };
  }

  /** A stored event arrived (live: time travel shows stored events only). */
  stored(event: StoredEvent): ReplyChange | null {
    if (event.type === 'agent_attempt') return this.#attempt(event.data.item_id, event.data.attempt);
    const itemId = answeredItem(event);
    if (itemId === undefined) return null;
    this.#ended.add(itemId);
    if (this.#draft?.itemId !== itemId) return null;
    this.#draft = null;
    return { type: 'clear' };
  }

  /**
   * The agent stopped running (paused, stopped, rate limited, in error)
   * before the reply was stored: its text goes. The step may be tried again,
   * as a newer attempt of the same item.
   */
  stopped(): ReplyChange | null {
    const draft = this.#draft;
    if (!draft || draft.closed) return null;
    draft.closed = true;
    return { type: 'clear' };
  }

  /** The draft a delta of this item and attempt goes to (new for a new item or a newer attempt), or null: not shown. */
  #draftFor(itemId: string, attempt: number): { draft: Draft; restart: boolean } | null {
    if (this.#ended.has(itemId)) return null;
    const current = this.#draft;
    if (current?.itemId === itemId) {
      if (attempt < current.attempt || (attempt === current.attempt && current.closed)) return null;
      if (attempt === current.attempt) return { draft: current, restart: false };
    } else if (current) {
      // Another item is being written now: the one before will show no more text.
      this.#ended.add(current.itemId);
    }
    return { draft: (this.#draft = newDraft(itemId, attempt)), restart: true };
  }

  /** `agent_attempt`: the step is tried again; the older attempt's text goes. */
  #attempt(itemId: string, attempt: number): ReplyChange | null {
    if (this.#ended.has(itemId)) return null;
    const draft = this.#draft;
    if (draft?.itemId === itemId && draft.attempt >= attempt) return null;
    if (draft && draft.itemId !== itemId) this.#ended.add(draft.itemId);
    this.#draft = newDraft(itemId, attempt);
    return draft ? { type: 'clear' } : null;
  }
}

function newDraft(itemId: string, attempt: number): Draft {
  return { itemId, attempt, pieces: [], shown: 0, closed: false };
}

/** The item an agent's stored answer ends (a message, command or finish with `data.item_id`), or undefined. */
function answeredItem(event: StoredEvent): string | undefined {
  if (event.source !== 'agent') return undefined;
  if (event.type === 'message' || event.type === 'command' || event.type === 'finish') return event.data.item_id;
  return undefined;
}
