import { errorFields, silentLogger, type Logger } from '../logger.ts';
import type { LoggedEvent, StatusFrame } from '../../protocol/index.ts';
import type { EventLog, LogFollower, StatusChannel } from '../store/index.ts';

export interface FeedListener {
  /** A stored event, from the log. Called in seq order; events of a gap in the feed are the listener's to fill. */
  event(logged: LoggedEvent): void;
  /** A transient status message; never stored, in no order relative to the events. */
  status(frame: StatusFrame): void;
  /** Events may have been missed (the follow started only now): read the log after what was sent. */
  resync?(): void;
}

/**
 * A node's one live feed: it follows the whole event log once (one consumer,
 * whoever wrote the events, on this node or another) and the status channel
 * once, and fans both out in process to the listeners of each conversation.
 * Events this node appends reach its listeners as soon as JetStream
 * acknowledges them; their copies from the follow are then skipped by seq.
 * The follow runs only while some listener's conversation has no session in
 * this process (passivated, or run by another node): when every one is local,
 * all its events come from the appends and the follow would only cost.
 * Keyed by conversation id, not by session, so listeners need no session in
 * memory and stay when one leaves and comes back.
 */
/** One conversation's listeners on this node, the last event handed to them, and whether its session is here. */
interface Room {
  listeners: Set<FeedListener>;
  lastSeq: number;
  local: boolean;
}

export class ConversationFeed {
  readonly #rooms = new Map<string, Room>();
  readonly #status: StatusChannel;
  readonly #logger: Logger;
  readonly #log: EventLog;
  readonly #isLocal: (conversationId: string) => boolean;
  readonly #unsubscribeStatus: () => void;
  #follower: LogFollower | null = null;
  /** Rooms whose conversation has no session in this process. */
  #remote = 0;

  /** `isLocal`: whether a conversation's session is in this process (its appends then feed its listeners). */
  constructor(
    log: EventLog,
    status: StatusChannel,
    logger: Logger = silentLogger,
    isLocal: (conversationId: string) => boolean = () => false,
  ) {
    this.#log = log;
    this.#status = status;
    this.#logger = logger;
    this.#isLocal = isLocal;
    this.#unsubscribeStatus = status.subscribe((conversationId, frame) =>
      this.#each(conversationId, (listener) => listener.status(frame)),
    );
  }

  /**
   * Adds a listener once the feed delivers every event appended from now on:
   * an event the listener then reads as history and gets live too is its to
   * drop by sequence.
   */
  async subscribe(conversationId: string, listener: FeedListener): Promise<() => void> {
    let room = this.#rooms.get(conversationId);
    if (!room) {
      room = { listeners: new Set(), lastSeq: 0, local: this.#isLocal(conversationId) };
      this.#rooms.set(conversationId, room);
      if (!room.local) this.#remote += 1;
    }
    const joined = room;
    joined.listeners.add(listener);
    const unsubscribe = () => {
      joined.listeners.delete(listener);
      if (joined.listeners.size > 0 || this.#rooms.get(conversationId) !== joined) return;
      this.#rooms.delete(conversationId);
      if (!joined.local) this.#remote -= 1;
      this.#unfollowIfIdle();
    };
    try {
      if (!joined.local) await this.#follow();
    } catch (err) {
      unsubscribe();
      throw err;
    }
    return unsubscribe;
  }

  /**
   * A conversation's session came into this process or left it: its
   * listeners then need the follow, or no longer do. One that needs it again
   * reads the log for what came meanwhile.
   */
  refresh(conversationId: string): void {
    const room = this.#rooms.get(conversationId);
    if (!room) return;
    const local = this.#isLocal(conversationId);
    if (local === room.local) return;
    room.local = local;
    if (local) {
      this.#remote -= 1;
      this.#unfollowIfIdle();
      return;
    }
    this.#remote += 1;
    this.#follow().then(
      () => {
        for (const listener of room.listeners) listener.resync?.();
      },
      (err: unknown) => this.#logger.warn('the live feed could not start', errorFields(err)),
    );
  }

  /**
   * An event this node appended, once JetStream acknowledged it: its listeners
   * get it now, and the same event coming back through the follow is skipped
   * unparsed. (Events of other writers come only through the follow; a
   * listener that sees an event id skip fills the gap from the log.)
   */
  delivered(conversationId: string, logged: LoggedEvent): void {
    if ((this.#rooms.get(conversationId)?.lastSeq ?? Infinity) < logged.seq) this.#event(conversationId, logged);
  }

  /** This node's listeners of a conversation. */
  count(conversationId: string): number {
    return this.#rooms.get(conversationId)?.listeners.size ?? 0;
  }

  /** Sends a status frame to every node's listeners of the conversation (this one's included). */
  publishStatus(conversationId: string, frame: StatusFrame): void {
    this.#status.publish(conversationId, frame);
  }

  async stop(): Promise<void> {
    this.#unsubscribeStatus();
    const follower = this.#follower;
    this.#follower = null;
    await follower?.stop();
  }

  /** Starts the follow when it is not running; resolves once it delivers every event appended from now on. */
  #follow(): Promise<void> {
    this.#follower ??= this.#log.follow({
      wants: (conversationId, seq) => (this.#rooms.get(conversationId)?.lastSeq ?? Infinity) < seq,
      event: (conversationId, logged) => this.#event(conversationId, logged),
      error: (err) => this.#logger.warn('the live feed failed; it starts again where it stopped', errorFields(err)),
    });
    return this.#follower.ready;
  }

  #unfollowIfIdle(): void {
    if (this.#remote > 0 || !this.#follower) return;
    const follower = this.#follower;
    this.#follower = null;
    follower.stop().catch((err: unknown) => this.#logger.warn('stopping the live feed failed', errorFields(err)));
  }

  #event(conversationId: string, logged: LoggedEvent): void {
    const room = this.#rooms.get(conversationId);
    if (!room || logged.seq <= room.lastSeq) return;
    room.lastSeq = logged.seq;
    this.#each(conversationId, (listener) => listener.event(logged));
  }

  #each(conversationId: string, deliver: (listener: FeedListener) => void): void {
    for (const listener of this.#rooms.get(conversationId)?.listeners ?? []) {
      try {
        deliver(listener);
      } catch (err) {
        this.#logger.error('a feed listener failed', { conversation_id: conversationId, ...errorFields(err) });
      }
    }
  }
}
