import { eventBytes, parseStoredEvent, type LoggedEvent } from '../../protocol/index.ts';

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

/** An event as a tail keeps it. */
interface Kept {
  seq: number;
  id: number;
  bytes: Uint8Array;
}

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
 * skipped some) ends it: the caller drops the tail. Events are kept as their
 * stored bytes and parsed again when served: a parsed event takes several
 * times its bytes in memory, and most kept events are never served.
 */
export class LogTail {
  readonly #limits: TailLimits;
  /** Slots before `#head` are events that left (emptied at once: a large event must not stay until a compaction). */
  #items: Array<Kept | undefined> = [];
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
    const bytes = eventBytes(logged.event);
    this.#items.push({ seq: logged.seq, id: logged.event.id, bytes });
    this.#lastId = logged.event.id;
    this.#bytes += bytes.length;
    while (
      this.#items.length - this.#head > this.#limits.events ||
      (this.#bytes > this.#limits.bytes && this.#items.length - this.#head > 1)
    ) {
      const gone = this.#items[this.#head]!;
      this.#items[this.#head++] = undefined;
      this.#bytes -= gone.bytes.length;
      this.#from = gone.seq;
      this.#fromId = gone.id;
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
    const idAtCursor = lo > this.#head ? items[lo - 1]!.id : this.#fromId;
    const end = Math.min(items.length, lo + limit);
    const page = (items.slice(lo, end) as Kept[]).map(({ seq, bytes }) => ({ seq, event: parseStoredEvent(bytes) }));
    return { items: page, hasMore: end < items.length, idAtCursor };
  }
}
