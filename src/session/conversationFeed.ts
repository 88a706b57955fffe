import type { LoggedEvent, StatusFrame } from '../protocol/index.ts';

export interface FeedListener {
  /** A stored event, after JetStream acknowledged it. Called in seq order. */
  event(logged: LoggedEvent): void;
  /** A transient status message; never stored. */
  status(frame: StatusFrame): void;
}

/**
 * In-process fan-out of a conversation's events to its connections. Keyed by
 * conversation id, not by session, so listeners stay when a session leaves
 * memory and comes back.
 */
export class ConversationFeed {
  readonly #rooms = new Map<string, { listeners: Set<FeedListener>; lastSeq: number }>();

  subscribe(conversationId: string, listener: FeedListener): () => void {
    let room = this.#rooms.get(conversationId);
    if (!room) this.#rooms.set(conversationId, (room = { listeners: new Set(), lastSeq: 0 }));
    const { listeners } = room;
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0 && this.#rooms.get(conversationId)?.listeners === listeners)
        this.#rooms.delete(conversationId);
    };
  }

  count(conversationId: string): number {
    return this.#rooms.get(conversationId)?.listeners.size ?? 0;
  }

  publishEvent(conversationId: string, logged: LoggedEvent): void {
    const room = this.#rooms.get(conversationId);
    if (!room) return;
    room.lastSeq = Math.max(room.lastSeq, logged.seq);
    for (const listener of room.listeners) listener.event(logged);
  }

  /**
   * Publishes the events of a log read that listeners have not had: an event
   * can be stored although its writer gave up waiting for the acknowledgement
   * (a NATS fault), and only a later read of the log finds it.
   */
  catchUp(conversationId: string, read: readonly LoggedEvent[]): void {
    const room = this.#rooms.get(conversationId);
    if (!room) return;
    for (const logged of read) if (logged.seq > room.lastSeq) this.publishEvent(conversationId, logged);
  }

  publishStatus(conversationId: string, frame: StatusFrame): void {
    for (const listener of this.#rooms.get(conversationId)?.listeners ?? []) listener.status(frame);
  }
}
