import type { LoggedEvent } from '../../protocol/index.ts';
import type { FollowHandlers, LogFollower, LogSubscriber, LogSubscription, ReadOptions, ReadPage } from './eventLog.ts';
import { Subscription, type Following, type Room } from './logSubscription.ts';
import { DEFAULT_TAIL_LIMITS, LogTail, type TailLimits } from './logTail.ts';

/** What a subscription is built from: an event log's reads and its one follow of every conversation. */
export interface SubscriptionSource {
  read(conversationId: string, options?: ReadOptions): Promise<ReadPage>;
  last(conversationId: string): Promise<LoggedEvent | undefined>;
  follow(handlers: FollowHandlers): LogFollower;
}

export interface LogSubscriptionsOptions {
  /** Told when the follow failed; it starts again where it stopped. */
  onFollowError?: (err: unknown) => void;
  /** What is kept of each followed conversation to serve a resume from memory. */
  tail?: Partial<TailLimits>;
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
 * A resume is served from memory when it can: once a subscription of a
 * conversation is live, the follow keeps that conversation's latest events (a
 * LogTail, bounded per conversation and across them), and keeps following it
 * for a while after its last subscriber left; a subscription whose cursor the
 * tail covers catches up from it without reading the log. The tail is fed by
 * the same follow as the subscriptions, so the same argument holds: what it
 * lacks comes live.
 *
 * The follow runs while some conversation has a subscriber (or a kept tail),
 * and parses only those conversations' events, once for all their subscribers.
 */
export class LogSubscriptions {
  readonly #source: SubscriptionSource;
  readonly #onFollowError: (err: unknown) => void;
  readonly #limits: TailLimits;
  /** In the order they were last subscribed to: the first tails are the first to go. */
  readonly #rooms = new Map<string, Room>();
  #tailBytes = 0;
  #following: Following | null = null;

  constructor(source: SubscriptionSource, options: LogSubscriptionsOptions = {}) {
    this.#source = source;
    this.#onFollowError = options.onFollowError ?? (() => {});
    this.#limits = { ...DEFAULT_TAIL_LIMITS, ...options.tail };
  }

  subscribe(conversationId: string, afterSeq: number, subscriber: LogSubscriber): LogSubscription {
    if (!Number.isSafeInteger(afterSeq) || afterSeq < 0)
      throw new RangeError(`afterSeq must be a non-negative integer, got ${afterSeq}`);
    const room = this.#rooms.get(conversationId) ?? { subscriptions: new Set(), tail: null, linger: null };
    if (room.linger) clearTimeout(room.linger);
    room.linger = null;
    this.#rooms.delete(conversationId);
    this.#rooms.set(conversationId, room);
    const subscription = new Subscription(conversationId, afterSeq, subscriber, this.#source, room, {
      leave: () => {
        room.subscriptions.delete(subscription);
        if (room.subscriptions.size > 0 || this.#rooms.get(conversationId) !== room) return;
        if (room.tail && this.#limits.keepMs > 0)
          room.linger = setTimeout(() => this.#close(conversationId, room), this.#limits.keepMs).unref();
        else this.#close(conversationId, room);
      },
      live: (cursor, lastId) => {
        if (room.tail || this.#limits.totalBytes === 0 || this.#rooms.get(conversationId) !== room) return;
        room.tail = new LogTail(cursor, lastId, this.#limits);
      },
    });
    room.subscriptions.add(subscription);
    subscription.start(this.#follow());
    return subscription;
  }

  /** An event of the conversation is stored at `seq`: the follow, if it follows it, should bring it soon. */
  expect(conversationId: string, seq: number): void {
    if (this.#rooms.has(conversationId)) this.#following?.follower.expect?.(seq);
  }

  /** Forgets what is kept of a conversation (its events were removed). */
  forget(conversationId: string): void {
    const room = this.#rooms.get(conversationId);
    if (room) this.#dropTail(conversationId, room);
  }

  /** Ends every subscription, every kept tail and the follow. */
  async stop(): Promise<void> {
    for (const room of [...this.#rooms.values()])
      for (const subscription of [...room.subscriptions]) subscription.close();
    for (const [conversationId, room] of [...this.#rooms]) this.#close(conversationId, room);
    await this.#unfollow();
  }

  /** The follow, started when none runs. */
  #follow(): Following {
    if (this.#following) return this.#following;
    const follower = this.#source.follow({
      wants: (conversationId) => this.#rooms.has(conversationId),
      event: (conversationId, logged) => {
        const room = this.#rooms.get(conversationId);
        if (!room) return;
        if (room.tail) this.#keep(conversationId, room, logged);
        for (const subscription of room.subscriptions) subscription.live(logged);
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

  /** Adds a live event to its room's tail; past the bytes for all tails, the least recently subscribed go. */
  #keep(conversationId: string, room: Room, logged: LoggedEvent): void {
    const added = room.tail!.push(logged);
    if (added === undefined) return this.#dropTail(conversationId, room);
    this.#tailBytes += added;
    for (const [id, other] of this.#rooms) {
      if (this.#tailBytes <= this.#limits.totalBytes) break;
      this.#dropTail(id, other);
    }
  }

  /** The room's tail goes; a room kept only for its tail goes with it. */
  #dropTail(conversationId: string, room: Room): void {
    this.#freeTail(room);
    this.#close(conversationId, room);
  }

  #freeTail(room: Room): void {
    this.#tailBytes -= room.tail?.bytes ?? 0;
    room.tail = null;
  }

  /** A room with no subscriber goes, its tail with it; with no room left, the follow stops. */
  #close(conversationId: string, room: Room): void {
    if (room.subscriptions.size > 0 || this.#rooms.get(conversationId) !== room) return;
    if (room.linger) clearTimeout(room.linger);
    room.linger = null;
    this.#freeTail(room);
    this.#rooms.delete(conversationId);
    if (this.#rooms.size === 0) void this.#unfollow();
  }

  #unfollow(): Promise<void> {
    const follower = this.#following?.follower;
    this.#following = null;
    return follower?.stop().catch((err: unknown) => this.#onFollowError(err)) ?? Promise.resolve();
  }
}
