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
}

export interface ReadPage {
  items: LoggedEvent[];
  hasMore: boolean;
}

/** What a follower of the whole log is told. */
export interface FollowHandlers {
  /** Whether the follower wants this event of a conversation; the others are skipped without being parsed. */
  wants(conversationId: string, seq: number): boolean;
  /** An event appended after the follow started: each once, in the log's order. */
  event(conversationId: string, logged: LoggedEvent): void;
  /** The follow failed and starts again where it stopped (nothing is skipped). */
  error?(err: unknown): void;
}

/** A follow of every conversation's events. */
export interface LogFollower {
  /** Resolves once every event appended from now on will be delivered. */
  readonly ready: Promise<void>;
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
  /** Follows every conversation's events appended from now on (a node's one live feed). */
  follow(handlers: FollowHandlers): LogFollower;
  /** Removes every event of the conversation. */
  purge(conversationId: string): Promise<void>;
}
