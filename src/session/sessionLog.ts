import { SESSION_MACHINE_VERSION } from '../../machines/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { StoredEvent } from '../protocol/index.ts';
import { EVENT_VERSION, eventBytes } from '../protocol/index.ts';
import { VersionConflictError, type EventLog, type SnapshotRecord, type SnapshotStore } from '../store/index.ts';
import { SessionClosedError } from './errors.ts';

/** Bytes of stored events a live session keeps at hand for its agent; beyond, it reads them from the log per step. */
const HISTORY_CACHE_BYTES = 4 * 1024 * 1024;

export interface SubmitResult {
  seq: number;
  duplicate: boolean;
}

export interface SessionLogDeps {
  log: EventLog;
  snapshots: SnapshotStore;
  snapshotEvery: number;
  clock: () => Date;
  logger: Logger;
}

export interface SessionLogStart {
  lastSeq: number;
  nextEventId: number;
  history: StoredEvent[] | null;
}

/**
 * One session's side of the event log: appends with the expected last
 * sequence (a conflict means another writer: the session closes), the next
 * event id, snapshots, and a bounded cache of the history for the agent.
 */
export class SessionLog {
  readonly #conversationId: string;
  readonly #deps: SessionLogDeps;
  readonly #onFault: (reason: string) => void;
  #history: StoredEvent[] | null;
  /** Bytes of the events in `#history`: past HISTORY_CACHE_BYTES the history is read from the log when needed. */
  #historyBytes = 0;
  #lastSeq: number;
  #nextEventId: number;
  #lastActivity: number;
  /** This conversation's events since the last snapshot (stream sequences are shared by all conversations). */
  #sinceSnapshot = 0;

  constructor(
    conversationId: string,
    deps: SessionLogDeps,
    start: SessionLogStart | undefined,
    onFault: (reason: string) => void,
  ) {
    this.#conversationId = conversationId;
    this.#deps = deps;
    this.#onFault = onFault;
    this.#history = start ? start.history : [];
    if (this.#history) {
      this.#historyBytes = this.#history.reduce((n, e) => n + eventBytes(e).length, 0);
      if (this.#historyBytes > HISTORY_CACHE_BYTES) this.#history = null;
    }
    this.#lastSeq = start?.lastSeq ?? 0;
    this.#nextEventId = start?.nextEventId ?? 0;
    this.#lastActivity = deps.clock().getTime();
  }

  get lastSeq(): number {
    return this.#lastSeq;
  }
  get nextEventId(): number {
    return this.#nextEventId;
  }
  get lastActivity(): number {
    return this.#lastActivity;
  }
  get snapshotDue(): boolean {
    return this.#sinceSnapshot >= this.#deps.snapshotEvery;
  }

  /** Every stored event, oldest first; `mailboxed` orders the read with the session's appends. */
  history(mailboxed: <T>(work: () => Promise<T>) => Promise<T>): Promise<readonly StoredEvent[]> {
    if (this.#history) return Promise.resolve(this.#history);
    return mailboxed(async () => {
      if (this.#history) return this.#history;
      const { items } = await this.#deps.log.read(this.#conversationId);
      const history = items.filter((i) => i.seq <= this.#lastSeq).map((i) => i.event);
      const bytes = history.reduce((n, e) => n + eventBytes(e).length, 0);
      // A long conversation's history is not kept: memory must not grow with the log.
      if (bytes <= HISTORY_CACHE_BYTES) {
        this.#history = history;
        this.#historyBytes = bytes;
      }
      return history;
    });
  }

  /** Appends one event; any fault other than a refused duplicate closes the session so it is reloaded from the log. */
  async append(event: StoredEvent, msgId?: string): Promise<SubmitResult> {
    try {
      const result = await this.#deps.log.append(event, { expectedLastSeq: this.#lastSeq, msgId });
      if (this.isDebug)
        this.debug(result.duplicate ? 'append was a duplicate: stored once already' : 'appended', {
          event_id: event.id,
          type: event.type,
          seq: result.seq,
        });
      if (result.duplicate) return result;
      this.#lastSeq = result.seq;
      this.#nextEventId = event.id + 1;
      this.#sinceSnapshot += 1;
      this.#lastActivity = Date.parse(event.ts);
      if (this.#history) {
        this.#history.push(event);
        this.#historyBytes += eventBytes(event).length;
        if (this.#historyBytes > HISTORY_CACHE_BYTES) this.#history = null;
      }
      return result;
    } catch (err) {
      const reason = err instanceof VersionConflictError ? 'another writer appended to it' : 'the event log failed';
      this.#onFault(reason);
      this.#deps.logger.error('append failed; session closed', {
        conversation_id: this.#conversationId,
        ...errorFields(err),
      });
      throw err instanceof VersionConflictError
        ? new SessionClosedError(this.#conversationId, reason, { cause: err })
        : err;
    }
  }

  /**
   * A retried action may be refused by the state its first attempt produced.
   * Ask the log whether the msgId was stored: JetStream checks dedupe before
   * the expected sequence, so an append expecting an impossible sequence
   * answers a duplicate with its original seq and stores nothing otherwise.
   */
  async probeDuplicate(msgId: string): Promise<SubmitResult | null> {
    // Any event will do: expecting an impossible sequence, it is never stored.
    const probe: StoredEvent = {
      v: EVENT_VERSION,
      id: this.#nextEventId,
      conversation_id: this.#conversationId,
      ts: this.#deps.clock().toISOString(),
      source: 'user',
      type: 'message',
      data: { content: '' },
    };
    try {
      const result = await this.#deps.log.append(probe, { expectedLastSeq: Number.MAX_SAFE_INTEGER, msgId });
      if (result.duplicate) this.debug('a retried action was stored once already', { seq: result.seq });
      return result.duplicate ? result : null;
    } catch (err) {
      if (err instanceof VersionConflictError) return null;
      throw err;
    }
  }

  /** Writes the snapshot of the state the log holds up to `lastSeq`. */
  async writeSnapshot(persisted: unknown): Promise<void> {
    if (this.#lastSeq === 0) return;
    const record: SnapshotRecord = {
      conversation_id: this.#conversationId,
      machine_version: SESSION_MACHINE_VERSION,
      seq: this.#lastSeq,
      next_event_id: this.#nextEventId,
      snapshot: persisted,
    };
    this.#sinceSnapshot = 0;
    await this.#deps.snapshots.put(record);
  }

  /** Whether debug lines are written: test it before building a line's fields (appends and decisions are hot). */
  get isDebug(): boolean {
    return this.#deps.logger.isDebug;
  }

  /** A debug line about this conversation. */
  debug(message: string, fields: Record<string, unknown>): void {
    if (this.#deps.logger.isDebug)
      this.#deps.logger.debug(message, { conversation_id: this.#conversationId, ...fields });
  }

  warn(message: string, err: unknown): void {
    this.#deps.logger.warn(message, { conversation_id: this.#conversationId, ...errorFields(err) });
  }
}
