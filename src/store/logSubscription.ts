import type { LoggedEvent } from '../../protocol/index.ts';
import type { LogFollower, LogSubscriber, LogSubscription } from './eventLog.ts';
import type { SubscriptionSource } from './logSubscriptions.ts';
import type { LogTail } from './logTail.ts';

/**
 * Stored events read per page while a subscription catches up, and the bytes
 * that end a page sooner: each page is a JetStream consumer made and deleted,
 * so a client away for a thousand events catches up in one or two, while a
 * page of large events stays small in memory.
 */
const CATCH_UP_PAGE = 1_000;
const CATCH_UP_BYTES = 1024 * 1024;

/** The running follow, and whether it is ready: it then delivers every event appended from now on. */
export interface Following {
  follower: LogFollower;
  ready: Promise<void>;
  isReady: boolean;
}

/** A conversation's subscriptions on this node, and the tail kept of it while the follow runs. */
export interface Room {
  readonly subscriptions: Set<Subscription>;
  tail: LogTail | null;
  /** Set while no one subscribes: the room, its tail with it, goes when it fires. */
  linger: NodeJS.Timeout | null;
}

/** What a subscription tells the subscriptions it belongs to. */
export interface SubscriptionHooks {
  /** It closed. */
  leave(): void;
  /** It went live at `cursor`, the id there being `lastId`: a tail can begin there. */
  live(cursor: number, lastId: number): void;
}

/**
 * One subscriber's cursor: catching up (from the room's tail when it holds
 * every event after the cursor, else from the log; live events held
 * meanwhile), or live.
 */
export class Subscription implements LogSubscription {
  readonly caughtUp: Promise<void>;
  readonly #conversationId: string;
  readonly #subscriber: LogSubscriber;
  readonly #source: SubscriptionSource;
  readonly #room: Room;
  readonly #hooks: SubscriptionHooks;
  #cursor: number;
  /** The id of the last event delivered (or at the cursor); null until known. Ids are dense from 0. */
  #lastId: number | null = null;
  /** Live events that came while the log was being read; null when live. */
  #held: LoggedEvent[] | null = [];
  #closed = false;
  #caughtUp!: () => void;
  /** The follow this subscription's live events come from (set by start). */
  #following!: Following;

  constructor(
    conversationId: string,
    afterSeq: number,
    subscriber: LogSubscriber,
    source: SubscriptionSource,
    room: Room,
    hooks: SubscriptionHooks,
  ) {
    this.#conversationId = conversationId;
    this.#cursor = afterSeq;
    this.#subscriber = subscriber;
    this.#source = source;
    this.#room = room;
    this.#hooks = hooks;
    this.caughtUp = new Promise((resolve) => (this.#caughtUp = resolve));
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#held = null;
    this.#hooks.leave();
  }

  /**
   * Reads what was stored after the cursor while the follow starts: the
   * catch-up ends only on a read that began once the follow delivered every
   * newer event, so nothing falls between the two (when the follow is ready
   * already, a first read that finds nothing more is the last).
   */
  start(following: Following): void {
    this.#following = following;
    void this.#catchUp().catch((err: unknown) => this.#fail(err));
  }

  /** An event from the follow. */
  live(logged: LoggedEvent): void {
    if (this.#closed || logged.seq <= this.#cursor) return;
    if (this.#held) {
      this.#held.push(logged);
      return;
    }
    if (this.#lastId !== null && logged.event.id > this.#lastId + 1) {
      // The follow skipped events of this conversation: the log has them.
      this.#held = [logged];
      void this.#catchUp().catch((err: unknown) => this.#fail(err));
      return;
    }
    // A subscriber's fault ends its own subscription, never the follow the others share.
    try {
      void this.#deliver(logged)?.catch((err: unknown) => this.#fail(err));
    } catch (err) {
      this.#fail(err);
    }
  }

  /**
   * Delivers the events after the cursor at the subscriber's pace (each page
   * from the room's tail when it still holds them all, else from the log),
   * then what was held, then goes live.
   */
  async #catchUp(): Promise<void> {
    for (;;) {
      if (this.#closed) return;
      // The tail is fed by the same follow as this subscription: what it lacks comes live.
      const fromTail = this.#room.tail?.after(this.#cursor, CATCH_UP_PAGE);
      const followed = fromTail !== undefined || this.#following.isReady;
      const page =
        fromTail ??
        (await this.#source.read(this.#conversationId, {
          afterSeq: this.#cursor,
          limit: CATCH_UP_PAGE,
          maxBytes: CATCH_UP_BYTES,
        }));
      if (fromTail && this.#lastId === null) this.#lastId = fromTail.idAtCursor;
      for (const logged of page.items) {
        if (this.#closed) return;
        const pace = this.#deliver(logged);
        if (pace) await pace;
      }
      if (page.hasMore && page.items.length > 0) continue;
      if (!followed) {
        // This read began before the follow was ready: an event stored in between is in neither.
        await this.#following.ready;
        continue;
      }
      if (this.#lastId === null && !(await this.#learnLastId())) continue;
      if (this.#release()) break;
    }
    if (!this.#closed) this.#hooks.live(this.#cursor, this.#lastId!);
    this.#caughtUp();
  }

  /**
   * Nothing was read after the cursor: the id of the event at (or before) it
   * is what the next one continues. False when events were stored meanwhile:
   * read them first.
   */
  async #learnLastId(): Promise<boolean> {
    const last = await this.#source.last(this.#conversationId);
    if (last && last.seq > this.#cursor) return false;
    this.#lastId = last?.event.id ?? -1;
    return true;
  }

  /** Goes live with what was held; false when the held events show a gap (the log is read again first). */
  #release(): boolean {
    const held = this.#held ?? [];
    this.#held = null;
    for (const [i, logged] of held.entries()) {
      if (this.#closed) return true;
      if (logged.seq <= this.#cursor) continue;
      if (this.#lastId !== null && logged.event.id > this.#lastId + 1) {
        this.#held = held.slice(i);
        return false;
      }
      void this.#deliver(logged)?.catch((err: unknown) => this.#fail(err));
    }
    return true;
  }

  /** Hands one event to the subscriber; what it returns is its pace (awaited only while catching up). */
  #deliver(logged: LoggedEvent): Promise<void> | undefined {
    if (logged.seq <= this.#cursor) return undefined;
    this.#cursor = logged.seq;
    this.#lastId = logged.event.id;
    const pace: unknown = this.#subscriber.event(logged);
    // Only a promise is a pace; anything else a subscriber returns (a callback's value) is not.
    return pace instanceof Promise ? pace : undefined;
  }

  #fail(err: unknown): void {
    if (this.#closed) return;
    this.close();
    this.#subscriber.failed(err);
  }
}
