import { sessionMachine, SESSION_MACHINE_VERSION, type SessionSnapshot } from '../../machines/index.ts';
import type { Agent, AgentContext, ListedServers } from '../agent/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { EVENT_VERSION } from '../../protocol/index.ts';
import {
  VersionConflictError,
  type AppendResult,
  type CheckpointStore,
  type EventLog,
  type SnapshotRecord,
  type SnapshotStore,
} from '../store/index.ts';
import { SessionUnavailableError } from '../errors.ts';

/** Events per read when the agent's context is rebuilt from the log: the memory it takes is one page. */
const REBUILD_PAGE = 1_000;

export interface SessionLogDeps {
  log: EventLog;
  agent: Agent;
  snapshots: SnapshotStore;
  snapshotEvery: number;
  checkpoints: CheckpointStore;
  /** A checkpoint each time the conversation's event count passes a multiple of this. */
  checkpointEvery: number;
  clock: () => Date;
  logger: Logger;
  /** False once this node may no longer act as the conversation's owner: nothing more is appended. */
  leaseValid?: () => boolean;
}

export interface SessionLogStart {
  lastSeq: number;
  nextEventId: number;
  /** Every stored event, oldest first, when they were read anyway; null: the agent's context is rebuilt from the log when first needed. */
  history: StoredEvent[] | null;
}

/**
 * One session's side of the event log: appends with the expected last
 * sequence (a conflict means another writer: the session is released), the next
 * event id, snapshots, and the agent's context, which observes every event
 * once, as it is stored, so an agent step never rereads the history.
 */
export class SessionLog {
  readonly #conversationId: string;
  readonly #deps: SessionLogDeps;
  readonly #onFault: (reason: string) => void;
  /** Null until first needed after a rehydration from a snapshot: then built once from the log. */
  #context: AgentContext | null;
  #lastSeq: number;
  #nextEventId: number;
  #lastActivity: number;
  /** Snapshot and checkpoint writes under way. */
  readonly #writes = new Set<Promise<void>>();
  /** This conversation's events since the last snapshot (stream sequences are shared by all conversations). */
  #sinceSnapshot = 0;
  #toolsListed: ListedServers | null = null;

  constructor(
    conversationId: string,
    deps: SessionLogDeps,
    start: SessionLogStart | undefined,
    onFault: (reason: string) => void,
  ) {
    this.#conversationId = conversationId;
    this.#deps = deps;
    this.#onFault = onFault;
    this.#context = start?.history === null ? null : this.#newContext();
    for (const event of start?.history ?? []) this.#context?.observe(event);
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

  /**
   * The agent's context, up to date with every stored event. After a rehydration
   * from a snapshot it is built on first use from the log, read once in pages;
   * `mailboxed` orders that read with the session's appends.
   */
  agentContext(mailboxed: <T>(work: () => Promise<T>) => Promise<T>): Promise<AgentContext> {
    if (this.#context) return Promise.resolve(this.#context);
    return mailboxed(async () => {
      if (this.#context) return this.#context;
      const context = this.#newContext();
      for (let afterSeq = 0, more = true; more;) {
        const page = await this.#deps.log.read(this.#conversationId, { afterSeq, limit: REBUILD_PAGE });
        for (const { seq, event } of page.items) if (seq <= this.#lastSeq) context.observe(event);
        afterSeq = page.items.at(-1)?.seq ?? afterSeq;
        more = page.hasMore && page.items.length > 0 && afterSeq < this.#lastSeq;
      }
      this.#context = context;
      return context;
    });
  }

  /** The MCP tools the log last listed (`tools_listed`), or null when it never listed any; read with the agent's context. */
  async toolsListed(mailboxed: <T>(work: () => Promise<T>) => Promise<T>): Promise<ListedServers | null> {
    await this.agentContext(mailboxed);
    return this.#toolsListed;
  }

  /** The agent's context, which also keeps the last `tools_listed` as it goes by. */
  #newContext(): AgentContext {
    const context = this.#deps.agent.context(this.#conversationId);
    return {
      observe: (event) => {
        if (event.type === 'tools_listed') this.#toolsListed = event.data.servers;
        context.observe(event);
      },
      step: (input) => context.step(input),
    };
  }

  /** Appends one event; any fault other than a refused duplicate releases the session, so that it is rehydrated from the log. */
  /**
   * Appends one decision's events in order, `msgId` on the first (a retried
   * action meets its duplicate there, and nothing is stored). Answers with the
   * caller's own event: the last user event (a message that interrupts comes
   * after its interrupt), else the first.
   */
  async appendAll(events: readonly StoredEvent[], msgId?: string): Promise<AppendResult> {
    let first: AppendResult | undefined;
    let own: AppendResult | undefined;
    for (const event of events) {
      const result = await this.append(event, first === undefined ? msgId : undefined);
      if (result.duplicate) return result;
      first ??= result;
      if (event.source === 'user') own = result;
    }
    return own ?? first!;
  }

  async append(event: StoredEvent, msgId?: string): Promise<AppendResult> {
    if (this.#deps.leaseValid?.() === false) {
      // Fenced: after a lapse another node may own the conversation and not have written yet.
      this.#onFault('the lease lapsed');
      throw new SessionUnavailableError(this.#conversationId, 'the lease lapsed');
    }
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
      this.#context?.observe(event);
      return result;
    } catch (err) {
      const reason = err instanceof VersionConflictError ? 'another writer appended to it' : 'the event log failed';
      this.#onFault(reason);
      this.#deps.logger.error('append failed; session released', {
        conversation_id: this.#conversationId,
        ...errorFields(err),
      });
      throw err instanceof VersionConflictError
        ? new SessionUnavailableError(this.#conversationId, reason, { cause: err })
        : err;
    }
  }

  /**
   * A retried action may be refused by the state its first attempt produced.
   * Ask the log whether the msgId was stored: JetStream checks dedupe before
   * the expected sequence, so an append expecting an impossible sequence
   * answers a duplicate with its original seq and stores nothing otherwise.
   */
  async probeDuplicate(msgId: string): Promise<AppendResult | null> {
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

  /** Writes the snapshot of `snapshot`, the state the log holds up to `lastSeq`. */
  async writeSnapshot(snapshot: SessionSnapshot): Promise<void> {
    if (this.#lastSeq === 0) return;
    this.#sinceSnapshot = 0;
    await this.#deps.snapshots.put(this.#record(snapshot));
  }

  /** Writes a snapshot in the background (a failure is logged); an ended conversation (about to be purged) gets none. */
  snapshotLater(snapshot: SessionSnapshot): void {
    if (snapshot.status !== 'active') return;
    this.#track(this.writeSnapshot(snapshot).catch((err) => this.warn('snapshot failed', err)));
  }

  /** Writes a checkpoint of the state just applied in the background; an ended conversation gets none. */
  checkpointLater(snapshot: SessionSnapshot): void {
    if (snapshot.status !== 'active' || this.#lastSeq === 0) return;
    const write = this.#deps.checkpoints.put(this.#record(snapshot));
    this.#track(write.catch((err) => this.warn('checkpoint failed', err)));
  }

  /** Resolves once every snapshot and checkpoint write under way is done: a purge after it finds them all. */
  async writesDone(): Promise<void> {
    await Promise.allSettled(this.#writes);
  }

  #track(write: Promise<void>): void {
    this.#writes.add(write);
    void write.finally(() => this.#writes.delete(write));
  }

  /**
   * Whether events `firstId`..`lastId` (one decision's) take the
   * conversation's event count past a multiple of `checkpointEvery`: its
   * checkpoints then fall every so many events, whatever node wrote them and
   * however often the session left memory.
   */
  checkpointDue(firstId: number, lastId: number): boolean {
    const every = this.#deps.checkpointEvery;
    return Math.floor((lastId + 1) / every) > Math.floor(firstId / every);
  }

  #record(snapshot: SessionSnapshot): SnapshotRecord {
    return {
      conversation_id: this.#conversationId,
      machine_version: SESSION_MACHINE_VERSION,
      seq: this.#lastSeq,
      next_event_id: this.#nextEventId,
      snapshot: sessionMachine.getPersistedSnapshot(snapshot),
    };
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
