import { errorFields, silentLogger, type Logger } from '../logger.ts';
import type { LoggedEvent, StatusFrame } from '../protocol/index.ts';
import type { EventLog, LogFollower, StatusChannel } from '../store/index.ts';

export interface FeedListener {
  /** A stored event, from the log. Called in seq order; events of a gap in the feed are the listener's to fill. */
  event(logged: LoggedEvent): void;
  /** A transient status message; never stored, in no order relative to the events. */
  status(frame: StatusFrame): void;
}

/**
 * A node's one live feed: it follows the whole event log once (one consumer,
 * whoever wrote the events, on this node or another) and the status channel
 * once, and fans both out in process to the listeners of each conversation.
 * Events this node appends reach its listeners as soon as JetStream
 * acknowledges them; their copies from the follow are then skipped by seq.
 * Keyed by conversation id, not by session, so listeners need no session in
 * memory and stay when one leaves and comes back.
 */
/** One conversation's listeners on this node, and the last event handed to them. */
interface Room {
  listeners: Set<FeedListener>;
  lastSeq: number;
}

export class ConversationFeed {
  readonly #rooms = new Map<string, Room>();
  readonly #status: StatusChannel;
  readonly #logger: Logger;
  readonly #follower: LogFollower;
  readonly #unsubscribeStatus: () => void;

  constructor(log: EventLog, status: StatusChannel, logger: Logger = silentLogger) {
    this.#status = status;
    this.#logger = logger;
    this.#follower = log.follow({
      wants: (conversationId, seq) => (this.#rooms.get(conversationId)?.lastSeq ?? Infinity) < seq,
      event: (conversationId, logged) => this.#event(conversationId, logged),
      error: (err) => logger.warn('the live feed failed; it starts again where it stopped', errorFields(err)),
    });
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
    await this.#follower.ready;
    let room = this.#rooms.get(conversationId);
    if (!room) this.#rooms.set(conversationId, (room = { listeners: new Set(), lastSeq: 0 }));
    const joined = room;
    joined.listeners.add(listener);
    return () => {
      joined.listeners.delete(listener);
      if (joined.listeners.size === 0 && this.#rooms.get(conversationId) === joined) this.#rooms.delete(conversationId);
    };
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
    await this.#follower.stop();
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
