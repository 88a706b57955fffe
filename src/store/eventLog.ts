import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';

export interface AppendOptions {
  /**
   * Stream sequence of the conversation's last stored event, 0 when it has none.
   * The append fails with VersionConflictError when the log has moved on: a
   * conversation has a single writer.
   */
  expectedLastSeq: number;
  /** Deduplication id (JetStream `Nats-Msg-Id`): a retried append is stored once. */
  msgId?: string;
}

export interface AppendResult {
  /** Stream sequence of the stored event (of the original one for a duplicate). */
  seq: number;
  /** True when msgId matched an earlier append and nothing new was stored. */
  duplicate: boolean;
}

export interface ReadOptions {
  /** Return events with seq greater than this (default 0: from the start). */
  afterSeq?: number;
  /** At most this many events (default: all). */
  limit?: number;
  /**
   * The page ends with the event that brings its stored bytes to this many
   * (a page holds at least one event; default: no bound), so a page of large
   * events is not held in memory whole.
   */
  maxBytes?: number;
}

export interface ReadPage {
  items: LoggedEvent[];
  hasMore: boolean;
}

/** What a subscriber of one conversation is told. */
export interface LogSubscriber {
  /**
   * Each stored event after the cursor, once and in order: the stored ones
   * first, then live ones as they are appended. While stored events are being
   * caught up on, a returned promise holds the next one back until it settles
   * (the subscriber's pace); live events are never held back.
   */
  event(logged: LoggedEvent): void | Promise<void>;
  /** The subscription cannot go on (a read of the log failed) and has ended: subscribe again from the last seq received. */
  failed(err: unknown): void;
}

/** One subscriber's subscription to a conversation. */
export interface LogSubscription {
  /** Resolves once every event stored after the cursor at subscription time has been delivered. */
  readonly caughtUp: Promise<void>;
  /** No more events. */
  close(): void;
}

/** What the one follow of the whole log (inside a store) is told. */
export interface FollowHandlers {
  /** Whether the follower wants this event of a conversation; the others are skipped without being parsed. */
  wants(conversationId: string, seq: number): boolean;
  /** An event appended after the follow started: each once, in the log's order. */
  event(conversationId: string, logged: LoggedEvent): void;
  /** The follow failed and starts again where it stopped (nothing is skipped). */
  error?(err: unknown): void;
}

/** The one follow of every conversation's events that feeds a store's subscriptions. */
export interface LogFollower {
  /** Resolves once every event appended from now on will be delivered. */
  readonly ready: Promise<void>;
  /** An event is stored at `seq`: a follow that brings nothing at all soon after looks for a new source. */
  expect?(seq: number): void;
  stop(): Promise<void>;
}

/**
 * The event log: one ordered subject of events per conversation.
 * Implementations: `jetStreamEventLog` (NATS JetStream) and `memoryEventLog`;
 * both pass `test/store/eventLogContract.ts`.
 */
export interface EventLog {
  append(event: StoredEvent, options: AppendOptions): Promise<AppendResult>;
  read(conversationId: string, options?: ReadOptions): Promise<ReadPage>;
  /** Stream sequence of the conversation's last event, 0 when it has none. */
  lastSeq(conversationId: string): Promise<number>;
  /** The conversation's last event, undefined when it has none. One direct read, no consumer. */
  last(conversationId: string): Promise<LoggedEvent | undefined>;
  /**
   * The conversation's events stored after `afterSeq`, then the live ones as
   * they are appended, each once and in order, whichever node appends them
   * and across a reconnect of this node to NATS. Every subscription of a
   * process is fed by one follow of the whole log.
   */
  subscribe(conversationId: string, afterSeq: number, subscriber: LogSubscriber): LogSubscription;
  /** Removes every event of the conversation. */
  purge(conversationId: string): Promise<void>;
  /**
   * Another node said it stored an event of the conversation at `seq` (an
   * action forwarded to its owner): this node's subscribers should have it
   * within moments, and a live feed that brings nothing at all is started
   * again. The log's own appends do this themselves.
   */
  expectDelivery?(conversationId: string, seq: number): void;
}
