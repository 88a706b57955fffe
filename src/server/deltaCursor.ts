import type { AgentState, LoggedEvent } from '../../protocol/index.ts';
import type { HeldAttempt } from '../queries/index.ts';

/** Items a connection remembers as stored (their late deltas are dropped). */
const ENDED_KEPT = 8;
/** Most events store no item: they share one empty answer instead of one each. */
const NONE: readonly string[] = [];

/**
 * Which deltas one client connection has had, so that it gets the deltas of
 * an item's attempt each once and in order, after the events it missed and
 * before the event that stores the item, and nothing of the item after that.
 */
export class DeltaCursor {
  /** Deltas go out once the client has every stored event it missed (the log's catch-up is done). */
  #ready = false;
  /** The item (and attempt) whose deltas this client is getting, and the next index it gets. */
  #current: { itemId: string; attempt: number; next: number } | null = null;
  /** Items whose stored event this client got: none of their deltas go out after it. */
  readonly #ended: string[] = [];
  /** The attempt this node held when the client joined an agent that was not running: it ended unanswered. */
  #stale: { itemId: string; attempt: number } | null = null;

  /** The client joined in `state`, when the node held `held`: an agent that is not running streams nothing. */
  joined(state: AgentState, held: HeldAttempt | null): void {
    if (state !== 'running' && held) this.#stale = { itemId: held.itemId, attempt: held.attempt };
  }

  /** The client has every event it missed: deltas may go out from now on. */
  caughtUp(): void {
    this.#ready = true;
  }

  /**
   * The deltas of `held` this client has not had, in index order, up to a
   * hole (the node fills it from the owner). A newer attempt starts again
   * from index 0; an item whose stored event the client got gives nothing.
   */
  *due(held: HeldAttempt | null): Generator<string> {
    if (!this.#ready || !held || this.#ended.includes(held.itemId)) return;
    if (held.itemId === this.#stale?.itemId && held.attempt <= this.#stale.attempt) return;
    let current = this.#current;
    if (!current || current.itemId !== held.itemId || current.attempt < held.attempt) {
      current = this.#current = { itemId: held.itemId, attempt: held.attempt, next: 0 };
    } else if (current.attempt > held.attempt) {
      return;
    }
    for (let delta = held.deltas[current.next]; delta !== undefined; delta = held.deltas[current.next]) {
      current.next += 1;
      yield delta.json;
    }
  }

  /**
   * An event about to go to the client: when it stores an item (an agent's
   * answer), the item's deltas still due are returned to go first, and the
   * item ends for this client.
   */
  before(logged: LoggedEvent, held: HeldAttempt | null): readonly string[] {
    const itemId = itemOf(logged);
    if (itemId === undefined) return NONE;
    const due = this.#current?.itemId === itemId && held?.itemId === itemId ? [...this.due(held)] : [];
    if (this.#current?.itemId === itemId) this.#current = null;
    this.#ended.push(itemId);
    if (this.#ended.length > ENDED_KEPT) this.#ended.shift();
    return due;
  }
}

/** The item an agent's answer stores (its step's deltas end with it), or undefined. */
function itemOf({ event }: LoggedEvent): string | undefined {
  if (event.source !== 'agent') return undefined;
  if (event.type === 'message' || event.type === 'command' || event.type === 'finish') return event.data.item_id;
  return undefined;
}
