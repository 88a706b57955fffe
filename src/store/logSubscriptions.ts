import type { LoggedEvent } from '../../protocol/index.ts';
import type { FollowHandlers, LogFollower, LogSubscriber, LogSubscription, ReadOptions, ReadPage } from './eventLog.ts';

/** What a subscription is built from: an event log's reads and its one follow of every conversation. */
export interface SubscriptionSource {
  read(conversationId: string, options?: ReadOptions): Promise<ReadPage>;
  last(conversationId: string): Promise<LoggedEvent | undefined>;
  follow(handlers: FollowHandlers): LogFollower;
}

/**
 * Stored events read per page while a subscription catches up, and the bytes
 * that end a page sooner: each page is a JetStream consumer made and deleted,
 * so a client away for a thousand events catches up in one or two, while a
 * page of large events stays small in memory.
 */
const CATCH_UP_PAGE = 1_000;
const CATCH_UP_BYTES = 1024 * 1024;

/** The running follow, and whether it is ready: it then delivers every event appended from now on. */
interface Following {
  follower: LogFollower;
  ready: Promise<void>;
  isReady: boolean;
}

/**
 * Gapless subscriptions to conversations, fed by one follow of the whole log:
 * the stored events after a cursor, then the live ones, each once and in
 * order. Both event logs build theirs on this class, so the twin cannot drift.
 *
 * Why nothing is missed: a subscription listens while it reads, and its
 * catch-up ends only on a read that began once the follow was ready, so an
 * event stored after that read comes live (the follow delivers every event
 * appended once it is ready, and starts again where it stopped after a
 * fault). The first pages are read while the follow starts. As a
 * second line, event ids are dense per conversation: a live event that skips
 * one makes the subscription read the gap from the log before it goes on. A
 * live event at or below the cursor (already read) is dropped by its seq.
 *
 * The follow runs while some conversation has a subscriber, and parses only
 * those conversations' events, once for all their subscribers.
 */
export class LogSubscriptions {
  readonly #source: SubscriptionSource;
  readonly #onFollowError: (err: unknown) => void;
  readonly #rooms = new Map<string, Set<Subscription>>();
  #following: Following | null = null;

  constructor(source: SubscriptionSource, onFollowError: (err: unknown) => void = () => {}) {
    this.#source = source;
    this.#onFollowError = onFollowError;
  }

  subscribe(conversationId: string, afterSeq: number, subscriber: LogSubscriber): LogSubscription {
    if (!Number.isSafeInteger(afterSeq) || afterSeq < 0)
      throw new RangeError(`afterSeq must be a non-negative integer, got ${afterSeq}`);
    let room = this.#rooms.get(conversationId);
    if (!room) this.#rooms.set(conversationId, (room = new Set()));
    const joined = room;
    const subscription = new Subscription(conversationId, afterSeq, subscriber, this.#source, () => {
      joined.delete(subscription);
      if (joined.size > 0 || this.#rooms.get(conversationId) !== joined) return;
      this.#rooms.delete(conversationId);
      if (this.#rooms.size === 0) void this.#unfollow();
    });
    joined.add(subscription);
    subscription.start(this.#follow());
    return subscription;
  }

  /** Ends every subscription and the follow. */
  async stop(): Promise<void> {
    for (const room of [...this.#rooms.values()]) for (const subscription of [...room]) subscription.close();
    await this.#unfollow();
  }

  /** The follow, started when none runs. */
  #follow(): Following {
    if (this.#following) return this.#following;
    const follower = this.#source.follow({
      wants: (conversationId) => this.#rooms.has(conversationId),
      event: (conversationId, logged) => {
        for (const subscription of this.#rooms.get(conversationId) ?? []) subscription.live(logged);
      },
      error: (err) => this.#onFollowError(err),
    });
    const following: Following = { follower, ready: follower.ready, isReady: false };
    // A failed start is handled by the subscriptions that wait for it (they fail), not here.
    void follower.ready.then(
      () => (following.isReady = true),
      () => {},
    );
    return (this.#following = following);
  }

  #unfollow(): Promise<void> {
    const follower = this.#following?.follower;
    this.#following = null;
    return follower?.stop().catch((err: unknown) => this.#onFollowError(err)) ?? Promise.resolve();
  }
}

/** One subscriber's cursor: catching up from the log (live events held meanwhile), or live. */
class Subscription implements LogSubscription {
  readonly caughtUp: Promise<void>;
  readonly #conversationId: string;
  readonly #subscriber: LogSubscriber;
  readonly #source: SubscriptionSource;
  readonly #leave: () => void;
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
    leave: () => void,
  ) {
    this.#conversationId = conversationId;
    this.#cursor = afterSeq;
    this.#subscriber = subscriber;
    this.#source = source;
    this.#leave = leave;
    this.caughtUp = new Promise((resolve) => (this.#caughtUp = resolve));
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#held = null;
    this.#leave();
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

  /** Delivers the stored events after the cursor at the subscriber's pace, then what was held, then goes live. */
  async #catchUp(): Promise<void> {
    for (;;) {
      if (this.#closed) return;
      const followed = this.#following.isReady;
      const page = await this.#source.read(this.#conversationId, {
        afterSeq: this.#cursor,
        limit: CATCH_UP_PAGE,
        maxBytes: CATCH_UP_BYTES,
      });
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
