import type { DeltaFrame } from '../../protocol/index.ts';
import type { DeltaMessage } from '../store/index.ts';

/** The deltas of an item's attempt a node holds, by index (a hole: one it has not received yet). */
export interface HeldAttempt {
  itemId: string;
  attempt: number;
  deltas: Array<DeltaMessage | undefined>;
}

/** Items whose deltas ended (a newer item began): their stragglers are dropped. */
const RETIRED_KEPT = 16;

/**
 * One conversation's deltas on one node, while it has listeners there: the
 * current item's newest attempt, each index once. A delta of an older attempt
 * than one already held, or of an item a newer one replaced, is dropped, so
 * every listener of the node sees one attempt at a time, the newest.
 */
export class DeltaRoom {
  #held: HeldAttempt | null = null;
  readonly #retired: string[] = [];
  /** Indexes held from 0 without a hole. */
  #contiguous = 0;

  get held(): HeldAttempt | null {
    return this.#held;
  }

  /** Whether deltas are missing before the newest one held (a catch-up from the owner fills them). */
  get hasHole(): boolean {
    return this.#held !== null && this.#contiguous < this.#held.deltas.length;
  }

  /** Takes one delta; false when it was dropped (stale, or held already). */
  add(delta: DeltaMessage): boolean {
    const { item_id: itemId, attempt, index } = delta.frame;
    if (this.#retired.includes(itemId)) return false;
    const held = this.#held;
    if (held === null || held.itemId !== itemId) {
      if (held !== null) this.#retire(held.itemId);
      this.#start(itemId, attempt);
    } else if (attempt < held.attempt) {
      return false;
    } else if (attempt > held.attempt) {
      this.#start(itemId, attempt);
    }
    const deltas = this.#held!.deltas;
    if (deltas[index] !== undefined) return false;
    deltas[index] = delta;
    while (deltas[this.#contiguous] !== undefined) this.#contiguous++;
    return true;
  }

  /** The owner's deltas of its current attempt, from index 0; true when any was new here. */
  merge(frames: readonly DeltaFrame[]): boolean {
    let added = false;
    for (const frame of frames) added = this.add({ frame, json: JSON.stringify(frame) }) || added;
    return added;
  }

  #start(itemId: string, attempt: number): void {
    this.#held = { itemId, attempt, deltas: [] };
    this.#contiguous = 0;
  }

  #retire(itemId: string): void {
    this.#retired.push(itemId);
    if (this.#retired.length > RETIRED_KEPT) this.#retired.shift();
  }
}
