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
  readonly #listeners = new Map<string, Set<FeedListener>>();

  subscribe(conversationId: string, listener: FeedListener): () => void {
    let set = this.#listeners.get(conversationId);
    if (!set) this.#listeners.set(conversationId, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.#listeners.get(conversationId) === set) this.#listeners.delete(conversationId);
    };
  }

  count(conversationId: string): number {
    return this.#listeners.get(conversationId)?.size ?? 0;
  }

  publishEvent(conversationId: string, logged: LoggedEvent): void {
    for (const listener of this.#listeners.get(conversationId) ?? []) listener.event(logged);
  }

  publishStatus(conversationId: string, frame: StatusFrame): void {
    for (const listener of this.#listeners.get(conversationId) ?? []) listener.status(frame);
  }
}
