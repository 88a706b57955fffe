import type { EventLog } from '../../src/store/index.ts';

export type ReadKind = 'read' | 'last' | 'lastSeq';

/** An EventLog that counts, per conversation, every call that reads it (appends and purges pass uncounted). */
export class CountingLog implements EventLog {
  readonly #log: EventLog;
  readonly #calls = new Map<string, ReadKind[]>();

  constructor(log: EventLog) {
    this.#log = log;
  }

  /** The read calls made for a conversation, in order. */
  callsFor(conversationId: string): ReadKind[] {
    return this.#calls.get(conversationId) ?? [];
  }

  /** Every conversation read at least once. */
  get conversationsRead(): string[] {
    return [...this.#calls.keys()];
  }

  #count(conversationId: string, kind: ReadKind): void {
    const calls = this.#calls.get(conversationId) ?? [];
    calls.push(kind);
    this.#calls.set(conversationId, calls);
  }

  append: EventLog['append'] = (event, options) => this.#log.append(event, options);
  purge: EventLog['purge'] = (conversationId) => this.#log.purge(conversationId);

  read: EventLog['read'] = (conversationId, options) => {
    this.#count(conversationId, 'read');
    return this.#log.read(conversationId, options);
  };

  last: EventLog['last'] = (conversationId) => {
    this.#count(conversationId, 'last');
    return this.#log.last(conversationId);
  };

  lastSeq: EventLog['lastSeq'] = (conversationId) => {
    this.#count(conversationId, 'lastSeq');
    return this.#log.lastSeq(conversationId);
  };

  /** Subscriptions read the inner log (uncounted): a client is not a read of interest here. */
  subscribe: EventLog['subscribe'] = (id, afterSeq, subscriber) => this.#log.subscribe(id, afterSeq, subscriber);
}
