import { eventBytes, type LoggedEvent, type StoredEvent } from '../../protocol/index.ts';
import type {
  AppendOptions,
  AppendResult,
  EventLog,
  FollowHandlers,
  LogFollower,
  LogSubscriber,
  LogSubscription,
  ReadOptions,
  ReadPage,
} from './eventLog.ts';
import { LogSubscriptions } from './logSubscriptions.ts';
import { assertConversationId } from './assertConversationId.ts';
import { VersionConflictError } from './errors.ts';
import { DUPLICATE_WINDOW_MS, readRange, scopedMsgId } from './eventLogRules.ts';

export interface MemoryEventLogOptions {
  /** Clock for the dedupe window, in milliseconds (default Date.now). */
  now?: () => number;
  /** How long a msgId is remembered (default 2 minutes, as the JetStream stream). */
  duplicateWindowMs?: number;
}

/** An event as JetStream holds it: its sequence and its bytes. */
interface StoredMessage {
  seq: number;
  json: string;
}

/**
 * The in-memory twin of JetStreamEventLog: one sequence counter across all
 * conversations (like a stream), the same expected-sequence check, msgId dedupe
 * scoped per conversation and decided before that check, and events kept as
 * JSON so readers never share objects with writers. It passes the same
 * contract suite; nothing survives the process.
 */
export class MemoryEventLog implements EventLog {
  readonly #now: () => number;
  readonly #windowMs: number;
  readonly #logs = new Map<string, StoredMessage[]>();
  /** Insertion order is time order: expired entries are pruned from the front. */
  readonly #seen = new Map<string, { seq: number; at: number }>();
  readonly #followers = new Set<FollowHandlers>();
  readonly #subscriptions = new LogSubscriptions(this);
  #lastSeq = 0;

  constructor(options: MemoryEventLogOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#windowMs = options.duplicateWindowMs ?? DUPLICATE_WINDOW_MS;
  }

  async append(event: StoredEvent, options: AppendOptions): Promise<AppendResult> {
    const conversationId = event.conversation_id;
    assertConversationId(conversationId);
    const now = this.#now();
    this.#pruneSeen(now);
    const key = options.msgId === undefined ? undefined : scopedMsgId(conversationId, options.msgId);
    const seen = key === undefined ? undefined : this.#seen.get(key);
    if (seen) return { seq: seen.seq, duplicate: true };

    const log = this.#logs.get(conversationId) ?? [];
    const last = log.at(-1)?.seq ?? 0;
    if (last !== options.expectedLastSeq) {
      throw new VersionConflictError(conversationId, options.expectedLastSeq);
    }
    const seq = ++this.#lastSeq;
    log.push({ seq, json: Buffer.from(eventBytes(event)).toString() });
    this.#logs.set(conversationId, log);
    if (key !== undefined) this.#seen.set(key, { seq, at: now });
    const message = log[log.length - 1]!;
    for (const follower of this.#followers)
      if (follower.wants(conversationId, seq)) follower.event(conversationId, toLoggedEvent(message));
    return { seq, duplicate: false };
  }

  async read(conversationId: string, options?: ReadOptions): Promise<ReadPage> {
    const { afterSeq, limit, maxBytes } = readRange(options);
    assertConversationId(conversationId);
    const log = this.#logs.get(conversationId) ?? [];
    const start = firstAfter(log, afterSeq);
    let end = Math.min(log.length, start + limit);
    for (let i = start, bytes = 0; i < end && maxBytes !== Number.POSITIVE_INFINITY; i++) {
      bytes += Buffer.byteLength(log[i]!.json);
      if (bytes >= maxBytes) end = i + 1;
    }
    return { items: log.slice(start, end).map(toLoggedEvent), hasMore: end < log.length };
  }

  async lastSeq(conversationId: string): Promise<number> {
    assertConversationId(conversationId);
    return this.#logs.get(conversationId)?.at(-1)?.seq ?? 0;
  }

  async last(conversationId: string): Promise<LoggedEvent | undefined> {
    assertConversationId(conversationId);
    const message = this.#logs.get(conversationId)?.at(-1);
    return message === undefined ? undefined : toLoggedEvent(message);
  }

  subscribe(conversationId: string, afterSeq: number, subscriber: LogSubscriber): LogSubscription {
    assertConversationId(conversationId);
    return this.#subscriptions.subscribe(conversationId, afterSeq, subscriber);
  }

  /** Every conversation's events appended from now on, delivered inside the append that stores them. */
  follow(handlers: FollowHandlers): LogFollower {
    this.#followers.add(handlers);
    return {
      ready: Promise.resolve(),
      stop: async () => {
        this.#followers.delete(handlers);
      },
    };
  }

  async purge(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    // Like a subject purge: the stream sequence and the dedupe window stay.
    this.#logs.delete(conversationId);
    this.#subscriptions.forget(conversationId);
  }

  #pruneSeen(now: number): void {
    for (const [key, { at }] of this.#seen) {
      if (now - at < this.#windowMs) return;
      this.#seen.delete(key);
    }
  }
}

function toLoggedEvent(message: StoredMessage): LoggedEvent {
  return { seq: message.seq, event: JSON.parse(message.json) as StoredEvent };
}

/** Index of the first message with a sequence above `seq` (the log is sorted). */
function firstAfter(log: readonly StoredMessage[], seq: number): number {
  let low = 0;
  let high = log.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if ((log[mid]?.seq ?? 0) <= seq) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** A fresh in-memory event log (tests, and runs without NATS). */
export function memoryEventLog(options?: MemoryEventLogOptions): MemoryEventLog {
  return new MemoryEventLog(options);
}
