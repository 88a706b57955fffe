import { createActor, type Actor, type AnyActorRef } from 'xstate';
import {
  agentStateOf,
  inputFrom,
  sessionMachine,
  SESSION_MACHINE_VERSION,
  toSessionEvent,
  type SessionMachine,
  type SessionSnapshot,
} from '../../machines/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { AgentState, NewEvent, PassivationReason, RuntimeStatus, StoredEvent } from '../protocol/index.ts';
import { EVENT_VERSION, eventBytes } from '../protocol/index.ts';
import { VersionConflictError, type SnapshotRecord, type SnapshotStore } from '../store/index.ts';
import { IllegalTransitionError, SessionClosedError } from './errors.ts';
import { describeEvent, stateFact } from './facts.ts';
import { SessionEffects, type SessionEffectDeps } from './sessionEffects.ts';
import { DeadlineTimer } from './deadlineTimer.ts';
import { secretMasker, type Masker } from './secretMasker.ts';

/** Bytes of stored events a live session keeps at hand for its agent; beyond, it reads them from the log per step. */
const HISTORY_CACHE_BYTES = 4 * 1024 * 1024;

/** Each live actor's effects. The machine is provided once for all sessions (a copy per session cost ~46 KiB). */
const effectsOf = new WeakMap<AnyActorRef, SessionEffects>();

const hostedMachine = sessionMachine.provide({
  actions: {
    // `starting` is entered only by the initial transition: the creation record (id 0) asks for the first runtime.
    startRuntime: ({ self }) => effectsOf.get(self)?.startRuntime(0),
    askAgent: ({ self, context }) => effectsOf.get(self)?.askAgent(context),
    runCommand: ({ self, context }) => effectsOf.get(self)?.runCommand(context),
  },
});

export interface SessionDeps extends SessionEffectDeps {
  snapshots: SnapshotStore;
  /** Write a snapshot every this many events (besides passivation). */
  snapshotEvery: number;
  /** How long closing waits for a session that is still starting. */
  startWaitMs: number;
  /** Called after every stored event took effect. */
  onApplied?: (session: Session, event: StoredEvent, before: AgentState) => void;
  /** Called once when the session can no longer write (conflict, store fault, close). */
  onClosed?: (session: Session, reason: string) => void;
}

export interface SubmitResult {
  seq: number;
  duplicate: boolean;
}

/** What a session is rebuilt from. `history` is null when it came from a snapshot (loaded on demand). */
export interface RestoredState {
  snapshot: SessionSnapshot;
  lastSeq: number;
  nextEventId: number;
  history: StoredEvent[] | null;
  /** The last `agent_state_changed` among the events read, if any. */
  recordedState: AgentState | undefined;
}

/**
 * One live conversation: an XState actor behind a mailbox. Every change goes
 * through `submit`: decide (the machine's `snapshot.can()` accepts the event
 * or refuses it), append to the log, then apply to the actor. Effects run
 * outside the mailbox and come back through `submit` as events.
 */
export class Session {
  readonly conversationId: string;
  readonly #deps: SessionDeps;
  readonly #effects: SessionEffects;
  readonly #deadline: DeadlineTimer;
  readonly #mask: Masker;
  #actor: Actor<SessionMachine> | null = null;
  #history: StoredEvent[] | null;
  /** Bytes of the events in `#history`: past HISTORY_CACHE_BYTES the history is read from the log when needed. */
  #historyBytes = 0;
  #lastSeq: number;
  #nextEventId: number;
  /** This conversation's events since the last snapshot (stream sequences are shared by all conversations). */
  #sinceSnapshot = 0;
  #runtimeStatus: RuntimeStatus = 'stopped';
  #mailbox: Promise<unknown> = Promise.resolve();
  #closed: string | null = null;
  lastActivity = Date.now();

  private constructor(conversationId: string, deps: SessionDeps, restored?: RestoredState) {
    this.conversationId = conversationId;
    this.#deps = deps;
    this.#history = restored ? restored.history : [];
    if (this.#history) {
      this.#historyBytes = this.#history.reduce((n, e) => n + eventBytes(e).length, 0);
      if (this.#historyBytes > HISTORY_CACHE_BYTES) this.#history = null;
    }
    this.#lastSeq = restored?.lastSeq ?? 0;
    this.#nextEventId = restored?.nextEventId ?? 0;
    this.#mask = secretMasker(Object.values(deps.secrets));
    this.#effects = new SessionEffects(this, deps);
    this.#deadline = new DeadlineTimer(deps.clock, (deadline) => this.#effects.deadlinePassed(deadline));
    if (restored) {
      const { context } = restored.snapshot;
      this.#runtimeStatus = context.runtime;
      const input = { ...context, startDeadline: null };
      this.#actor = this.#host(createActor(hostedMachine, { snapshot: restored.snapshot, input }));
    }
  }

  /** A new conversation: stores its creation record, then starts the machine. */
  static async create(
    conversationId: string,
    deps: SessionDeps,
    created: Extract<NewEvent, { type: 'conversation_created' }>,
  ): Promise<Session> {
    const session = new Session(conversationId, deps);
    await session.submit(created);
    return session;
  }

  /**
   * A conversation brought back into memory. Stores `session_rehydrated`, then
   * starts again what it was waiting for: a pending agent step is retried, a
   * command that was running when the process died is reported as interrupted.
   */
  static async restore(
    conversationId: string,
    deps: SessionDeps,
    state: RestoredState,
    from: 'snapshot' | 'log',
    folded: number,
  ): Promise<Session> {
    const session = new Session(conversationId, deps, state);
    const wasPassivated = state.snapshot.matches('passivated');
    await session.#mailboxed(() => session.#repairStateFact(state.recordedState));
    await session.submit({ source: 'environment', type: 'session_rehydrated', data: { from, events_folded: folded } });
    if (!wasPassivated) session.#effects.resume(state.snapshot);
    return session;
  }

  get state(): AgentState {
    return this.#actor ? agentStateOf(this.#actor.getSnapshot()) : 'loading';
  }
  get snapshot(): SessionSnapshot | undefined {
    return this.#actor?.getSnapshot();
  }
  get lastSeq(): number {
    return this.#lastSeq;
  }
  get runtimeStatus(): RuntimeStatus {
    return this.#runtimeStatus;
  }
  /** The user who created the conversation. */
  get owner(): string | undefined {
    return this.#actor?.getSnapshot().context.user;
  }
  get closed(): boolean {
    return this.#closed !== null;
  }
  /** The runtime died and has not been replaced. */
  get runtimeLost(): boolean {
    return this.#effects.runtimeLost;
  }

  /** Every stored event, oldest first; read from the log the first time after a snapshot restore. */
  history(): Promise<readonly StoredEvent[]> {
    if (this.#history) return Promise.resolve(this.#history);
    return this.#mailboxed(async () => {
      if (this.#history) return this.#history;
      const { items } = await this.#deps.log.read(this.conversationId);
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

  /**
   * Stores the event and, once JetStream acknowledged it, applies it. Rejects
   * with IllegalTransitionError when the machine refuses it (nothing stored).
   */
  submit(event: NewEvent, msgId?: string): Promise<SubmitResult> {
    return this.#mailboxed(() => this.#apply(event, msgId));
  }

  /** Replaces the runtime with a fresh one in the same workspace. */
  reconnectRuntime(): Promise<void> {
    if (this.#closed !== null) return Promise.reject(new SessionClosedError(this.conversationId, this.#closed));
    return this.#effects.reconnect();
  }

  /**
   * Leaves memory: effects stop, a command still running is recorded as
   * interrupted, `session_passivated` is stored and a snapshot written. A
   * session still starting is waited for (bounded by `startWaitMs`).
   */
  async passivate(reason: PassivationReason): Promise<void> {
    await this.#waitForStart();
    if (this.#closed !== null) return;
    await this.#effects.stop(`passivated (${reason})`);
    await this.#mailboxed(async () => {
      const snapshot = this.#actor?.getSnapshot();
      const pending = snapshot?.context.pendingCommand;
      if (pending && !snapshot?.matches({ active: 'awaiting_user_confirmation' })) {
        await this.#apply(this.#effects.interrupted(pending, 'the session left memory before this command finished'));
      }
      if (this.#runtimeStatus !== 'stopped') {
        await this.#apply({ source: 'environment', type: 'runtime_status', data: { status: 'stopped' } });
      }
      await this.#apply({ source: 'environment', type: 'session_passivated', data: { reason, state: this.state } });
      // Closed in this same job: an action queued behind it is refused as
      // "closed" and goes to the session that comes back, never to this one.
      this.#markClosed(`passivated (${reason})`);
      await this.#writeSnapshot();
    });
    await this.close(`passivated (${reason})`);
  }

  /**
   * Ends the conversation for good (it is being deleted): stores
   * `session_closed`, which takes the machine to its final state, then
   * closes. Followers of the log see it before the events are purged. A
   * session still starting is waited for (bounded by `startWaitMs`).
   */
  async end(reason: string): Promise<void> {
    await this.#waitForStart();
    await this.#end(reason);
  }

  /**
   * Ends a conversation that is not in memory, from its loaded state: the
   * session is rebuilt only to decide and store `session_closed` (nothing is
   * resumed, no effect starts), then closed.
   */
  static async endStored(
    conversationId: string,
    deps: SessionDeps,
    state: RestoredState,
    reason: string,
  ): Promise<void> {
    await new Session(conversationId, deps, state).#end(reason);
  }

  /** Stops the actor, timers and the runtime. Pending and later submits are refused. */
  async close(reason = 'closed'): Promise<void> {
    await this.#waitForStart();
    this.#markClosed(reason);
    this.#deadline.clear();
    await this.#mailbox;
    this.#actor?.stop();
    await this.#effects.stop(reason);
  }

  async #end(reason: string): Promise<void> {
    try {
      await this.submit({ source: 'environment', type: 'session_closed', data: { reason } });
    } finally {
      await this.close(reason);
    }
  }

  async #apply(proposal: NewEvent, msgId?: string): Promise<SubmitResult> {
    if (this.#closed !== null) throw new SessionClosedError(this.conversationId, this.#closed);
    // Secrets reach the runtime's environment, never the log (nor, so, any frame or REST answer).
    const input = this.#stamp(this.#mask(proposal), this.#nextEventId);
    const machineEvent = toSessionEvent(input);
    const before = this.#actor?.getSnapshot();
    if (machineEvent && before && !before.can(machineEvent)) {
      const duplicate = msgId === undefined ? null : await this.#probeDuplicate(input, msgId);
      if (duplicate) return duplicate;
      const refusal = new IllegalTransitionError(describeEvent(machineEvent), agentStateOf(before));
      this.#debugLog?.debug('refused', {
        conversation_id: this.conversationId,
        input: `${input.source} ${input.type}`,
        machine_event: machineEvent.type,
        state: agentStateOf(before),
        reason: refusal.message,
      });
      throw refusal;
    }
    const first = await this.#append(input, msgId);
    if (first.duplicate) return first;
    if (input.type === 'runtime_status') this.#runtimeStatus = input.data.status;
    if (input.type === 'conversation_created') {
      this.#actor = this.#host(createActor(hostedMachine, { input: inputFrom(input) }));
    } else if (machineEvent) {
      this.#actor?.send(machineEvent);
    }
    const after = this.#actor?.getSnapshot();
    this.#afterApply(input, before ? agentStateOf(before) : 'loading');
    // The state fact is derived: it records where the stored event led, right
    // after it and before any effect's result (effects run after this job).
    const fact = before && after ? stateFact(before, after) : null;
    this.#debugLog?.debug('decided', {
      conversation_id: this.conversationId,
      input: `${input.source} ${input.type}`,
      machine_event: machineEvent?.type ?? null,
      from: before ? agentStateOf(before) : 'loading',
      to: this.state,
      events: fact ? [input.type, fact.type] : [input.type],
    });
    if (fact) {
      await this.#append(this.#stamp({ ...fact, cause: input.id }, this.#nextEventId));
      this.#maybeSnapshot();
    }
    return first;
  }

  #afterApply(event: StoredEvent, before: AgentState): void {
    this.lastActivity = Date.now();
    const snapshot = this.#actor?.getSnapshot();
    // A conversation that ended (the machine's final state) waits for nothing.
    if (snapshot) this.#deadline.arm(snapshot.status === 'active' ? snapshot.context.deadline : null);
    this.#deps.onApplied?.(this, event, before);
    this.#maybeSnapshot();
  }

  /**
   * Writes a periodic snapshot. Only called where the actor's state matches the
   * log up to `#lastSeq`: after an event is applied, or after its state fact.
   */
  #maybeSnapshot(): void {
    if (this.#sinceSnapshot < this.#deps.snapshotEvery) return;
    // An ended conversation is about to be purged: a snapshot written now could outlive it.
    if (this.#actor?.getSnapshot().status !== 'active') return;
    void this.#writeSnapshot().catch((err) =>
      this.#deps.logger.warn('snapshot failed', { conversation_id: this.conversationId, ...errorFields(err) }),
    );
  }

  /** Appends one event; any fault other than a refused duplicate closes the session so it is reloaded from the log. */
  async #append(event: StoredEvent, msgId?: string): Promise<SubmitResult> {
    try {
      const result = await this.#deps.log.append(event, { expectedLastSeq: this.#lastSeq, msgId });
      this.#debugLog?.debug(result.duplicate ? 'append was a duplicate: stored once already' : 'appended', {
        conversation_id: this.conversationId,
        event_id: event.id,
        type: event.type,
        seq: result.seq,
      });
      if (result.duplicate) return result;
      this.#lastSeq = result.seq;
      this.#nextEventId = event.id + 1;
      this.#sinceSnapshot += 1;
      if (this.#history) {
        this.#history.push(event);
        this.#historyBytes += eventBytes(event).length;
        if (this.#historyBytes > HISTORY_CACHE_BYTES) this.#history = null;
      }
      this.#deps.feed.publishEvent(this.conversationId, { seq: result.seq, event });
      return result;
    } catch (err) {
      const reason = err instanceof VersionConflictError ? 'another writer appended to it' : 'the event log failed';
      this.#markClosed(reason);
      this.#deps.logger.error('append failed; session closed', {
        conversation_id: this.conversationId,
        ...errorFields(err),
      });
      throw err instanceof VersionConflictError
        ? new SessionClosedError(this.conversationId, reason, { cause: err })
        : err;
    }
  }

  /**
   * A retried action may be refused by the state its first attempt produced.
   * Ask the log whether the msgId was stored: JetStream checks dedupe before
   * the expected sequence, so an append expecting an impossible sequence
   * answers a duplicate with its original seq and stores nothing otherwise.
   */
  async #probeDuplicate(event: StoredEvent, msgId: string): Promise<SubmitResult | null> {
    try {
      const result = await this.#deps.log.append(event, { expectedLastSeq: Number.MAX_SAFE_INTEGER, msgId });
      if (result.duplicate) {
        this.#debugLog?.debug('a retried action was stored once already', {
          conversation_id: this.conversationId,
          type: event.type,
          seq: result.seq,
        });
      }
      return result.duplicate ? result : null;
    } catch (err) {
      if (err instanceof VersionConflictError) return null;
      throw err;
    }
  }

  /** After a crash between an event and its state fact, the log can lag the fold by one fact. */
  async #repairStateFact(recorded: AgentState | undefined): Promise<void> {
    const state = this.state;
    if (recorded === undefined || recorded === state) return;
    await this.#append(
      this.#stamp({ source: 'environment', type: 'agent_state_changed', data: { state } }, this.#nextEventId),
    );
  }

  async #writeSnapshot(): Promise<void> {
    const actor = this.#actor;
    if (!actor || this.#lastSeq === 0) return;
    const record: SnapshotRecord = {
      conversation_id: this.conversationId,
      machine_version: SESSION_MACHINE_VERSION,
      seq: this.#lastSeq,
      next_event_id: this.#nextEventId,
      snapshot: actor.getPersistedSnapshot(),
    };
    this.#sinceSnapshot = 0;
    await this.#deps.snapshots.put(record);
  }

  async #waitForStart(): Promise<void> {
    const until = Date.now() + this.#deps.startWaitMs;
    while (this.state === 'loading' && this.#closed === null && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  #mailboxed<T>(work: () => Promise<T>): Promise<T> {
    const job = this.#mailbox.then(work);
    this.#mailbox = job.catch(() => undefined);
    return job;
  }

  #stamp(event: NewEvent, id: number): StoredEvent {
    const { source, type, cause, data } = event;
    // Envelope first, so the stored JSON reads in the order of the contract.
    return {
      v: EVENT_VERSION,
      id,
      conversation_id: this.conversationId,
      ts: this.#deps.clock().toISOString(),
      source,
      type,
      ...(cause !== undefined && { cause }),
      data,
    } as StoredEvent;
  }

  /** Binds the actor to this session's effects, then starts it (the initial state's entry may ask for one). */
  #host(actor: Actor<SessionMachine>): Actor<SessionMachine> {
    effectsOf.set(actor, this.#effects);
    return actor.start();
  }

  /** The logger when it writes debug lines: `this.#debugLog?.debug(m, {...})` builds no fields otherwise. */
  get #debugLog(): Logger | undefined {
    return this.#deps.logger.isDebug ? this.#deps.logger : undefined;
  }

  #markClosed(reason: string): void {
    if (this.#closed !== null) return;
    this.#closed = reason;
    this.#deadline.clear();
    this.#deps.onClosed?.(this, reason);
  }
}
