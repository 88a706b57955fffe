import { eventBytes, type LoggedEvent } from '../../protocol/index.ts';

/** What a node keeps of the conversations it follows, to serve a resume from memory. */
export interface TailLimits {
  /** Events kept per conversation (the oldest go first). */
  events: number;
  /** Stored bytes kept per conversation. */
  bytes: number;
  /** Stored bytes kept across every conversation; the tails least recently subscribed to go first. 0: no tails. */
  totalBytes: number;
  /** How long a conversation stays followed, its tail kept, after its last subscriber left (ms). */
  keepMs: number;
}

export const DEFAULT_TAIL_LIMITS: TailLimits = {
  events: 4_096,
  bytes: 1024 * 1024,
  totalBytes: 64 * 1024 * 1024,
  keepMs: 120_000,
};

/** A page of a tail: the events after a cursor, and the id of the event at (or before) the cursor. */
export interface TailPage {
  items: LoggedEvent[];
  hasMore: boolean;
  /** The id of the last event at or before the cursor (-1: none). */
  idAtCursor: number;
}

/**
 * The latest events of one conversation, as the follow delivered them: every
 * event stored after `from` is here, in order, up to the bounds. It begins at a
 * subscription that went live (its cursor and the id there are known) and is
 * fed by the follow from then on; the oldest events leave as the bounds ask,
 * which moves `from` up. An event whose id is not the next one (the follow
 * skipped some) ends it: the caller drops the tail.
 */
export class LogTail {
  readonly #limits: TailLimits;
  /** Slots before `#head` are events that left (emptied at once: a large event must not stay until a compaction). */
  #items: Array<LoggedEvent | undefined> = [];
  #head = 0;
  /** Every event of the conversation after this stream sequence is held. */
  #from: number;
  /** The id of the event at `#from` (-1: none). */
  #fromId: number;
  #lastId: number;
  #bytes = 0;

  constructor(from: number, idAtFrom: number, limits: TailLimits) {
    this.#from = from;
    this.#fromId = this.#lastId = idAtFrom;
    this.#limits = limits;
  }

  /** The stored bytes held. */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Adds an event the follow delivered; returns the change in bytes held, or
   * undefined when the event is not the next one (the tail no longer knows
   * every event: drop it). One at or before the last is ignored.
   */
  push(logged: LoggedEvent): number | undefined {
    const last = this.#items.length > this.#head ? this.#items[this.#items.length - 1]!.seq : this.#from;
    if (logged.seq <= last) return 0;
    if (logged.event.id !== this.#lastId + 1) return undefined;
    const before = this.#bytes;
    this.#items.push(logged);
    this.#lastId = logged.event.id;
    this.#bytes += eventBytes(logged.event).length;
    while (
      this.#items.length - this.#head > this.#limits.events ||
      (this.#bytes > this.#limits.bytes && this.#items.length - this.#head > 1)
    ) {
      const gone = this.#items[this.#head]!;
      this.#items[this.#head++] = undefined;
      this.#bytes -= eventBytes(gone.event).length;
      this.#from = gone.seq;
      this.#fromId = gone.event.id;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return this.#bytes - before;
  }

  /** Up to `limit` events after `cursor`, or undefined when some of them already left the tail. */
  after(cursor: number, limit: number): TailPage | undefined {
    if (cursor < this.#from) return undefined;
    const items = this.#items;
    // The first event after the cursor (events are in seq order).
    let [lo, hi] = [this.#head, items.length];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (items[mid]!.seq <= cursor) lo = mid + 1;
      else hi = mid;
    }
    const idAtCursor = lo > this.#head ? items[lo - 1]!.event.id : this.#fromId;
    const end = Math.min(items.length, lo + limit);
    return { items: items.slice(lo, end) as LoggedEvent[], hasMore: end < items.length, idAtCursor };
  }
}
