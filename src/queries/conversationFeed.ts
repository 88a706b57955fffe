import type { LoggedEvent, StatusFrame } from '../../protocol/index.ts';
import type { EventLog, LogSubscriber, LogSubscription, StatusChannel } from '../store/index.ts';

/** One listener of a conversation on this node (a client connection, say). */
export interface FeedMember {
  /** The conversation's stored events after `afterSeq`, then live ones, each once and in order (the log's subscription). */
  follow(afterSeq: number, subscriber: LogSubscriber): LogSubscription;
  /** No more status frames or events; the listener no longer counts. */
  leave(): void;
}

/** A listener of a conversation's events and status frames, for in-process use (benches, tools). */
export interface FeedListener {
  event(logged: LoggedEvent): void;
  status?(frame: StatusFrame): void;
}

/**
 * A node's live feed. Events come one way only: the event log's gapless
 * subscription, which one follow of the whole log feeds, whichever node
 * appended them (this one included). Status frames, transient and never
 * stored, come from the status channel, subscribed once per node and fanned
 * out here. It counts each conversation's listeners on this node, which the
 * passivation policy reads.
 */
export class ConversationFeed {
  readonly #log: EventLog;
  readonly #status: StatusChannel;
  readonly #rooms = new Map<string, Set<(frame: StatusFrame) => void>>();
  #unsubscribeStatus: (() => void) | null = null;

  constructor(log: EventLog, status: StatusChannel) {
    this.#log = log;
    this.#status = status;
  }

  /** Joins a conversation: its status frames from now on go to `onStatus`; its events once `follow` is called. */
  join(conversationId: string, onStatus: (frame: StatusFrame) => void): FeedMember {
    this.#unsubscribeStatus ??= this.#status.subscribe((id, frame) => {
      for (const listener of this.#rooms.get(id) ?? []) listener(frame);
    });
    let room = this.#rooms.get(conversationId);
    if (!room) this.#rooms.set(conversationId, (room = new Set()));
    const joined = room;
    // A function of its own per member, so that the same callback joining twice counts twice.
    const listener = (frame: StatusFrame) => onStatus(frame);
    joined.add(listener);
    let subscription: LogSubscription | null = null;
    return {
      follow: (afterSeq, subscriber) => {
        subscription?.close();
        subscription = this.#log.subscribe(conversationId, afterSeq, subscriber);
        return subscription;
      },
      leave: () => {
        subscription?.close();
        subscription = null;
        joined.delete(listener);
        if (joined.size === 0 && this.#rooms.get(conversationId) === joined) this.#rooms.delete(conversationId);
      },
    };
  }

  /**
   * Listens to a conversation's events after `afterSeq` and its status frames
   * (in-process listeners: benches and tools); returns the unsubscribe.
   */
  listen(conversationId: string, afterSeq: number, listener: FeedListener): { caughtUp: Promise<void>; stop(): void } {
    const member = this.join(conversationId, (frame) => listener.status?.(frame));
    const subscription = member.follow(afterSeq, {
      event: (logged) => {
        listener.event(logged);
      },
      failed: () => member.leave(),
    });
    return { caughtUp: subscription.caughtUp, stop: () => member.leave() };
  }

  /** This node's listeners of a conversation. */
  count(conversationId: string): number {
    return this.#rooms.get(conversationId)?.size ?? 0;
  }

  /** Sends a status frame to every node's listeners of the conversation (this one's included). */
  publishStatus(conversationId: string, frame: StatusFrame): void {
    this.#status.publish(conversationId, frame);
  }

  stop(): void {
    this.#unsubscribeStatus?.();
    this.#unsubscribeStatus = null;
  }
}
