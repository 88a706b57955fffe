import { createActor, transition, type Actor } from 'xstate';
import {
  agentStateOf,
  sessionMachine,
  toSessionEvent,
  type SessionEvent,
  type SessionMachine,
  type SessionSnapshot,
} from '../../machines/index.ts';
import type { AgentState, LoggedEvent, NewEvent, RuntimeStatus, StoredEvent } from '../protocol/index.ts';
import { EVENT_VERSION } from '../protocol/index.ts';
import { VersionConflictError } from '../store/index.ts';
import { errorFields } from '../logger.ts';
import { IllegalTransitionError, SessionClosedError } from './errors.ts';
import { SessionEffects, type SessionEffectDeps } from './sessionEffects.ts';

export interface SessionDeps extends SessionEffectDeps {
  /** Called once when the session can no longer write (conflict, store fault, close). */
  onClosed?: (session: Session, reason: string) => void;
}

export interface SubmitResult {
  seq: number;
  duplicate: boolean;
}

/** What a session is rebuilt from: the fold of its log. */
export interface RestoredState {
  snapshot: SessionSnapshot;
  history: StoredEvent[];
  lastSeq: number;
}

/**
 * One live conversation: an XState actor behind a mailbox. Every change goes
 * through `submit`: decide with the pure `transition()`, append to the log,
 * then apply to the actor. Effects run outside the mailbox and come back
 * through `submit` as events.
 */
export class Session {
  readonly conversationId: string;
  readonly #deps: SessionDeps;
  readonly #machine: SessionMachine;
  readonly #effects: SessionEffects;
  #actor: Actor<SessionMachine> | null = null;
  readonly #history: StoredEvent[];
  #lastSeq: number;
  #runtimeStatus: RuntimeStatus = 'stopped';
  #mailbox: Promise<unknown> = Promise.resolve();
  #closed: string | null = null;

  private constructor(conversationId: string, deps: SessionDeps, restored?: RestoredState) {
    this.conversationId = conversationId;
    this.#deps = deps;
    this.#history = restored?.history ?? [];
    this.#lastSeq = restored?.lastSeq ?? 0;
    this.#effects = new SessionEffects(this, deps);
    this.#machine = sessionMachine.provide({ actions: this.#effects.actions() });
    for (const event of this.#history) if (event.type === 'runtime_status') this.#runtimeStatus = event.data.status;
    if (restored) {
      const { conversationId: cid, maxIterations } = restored.snapshot.context;
      this.#actor = createActor(this.#machine, { snapshot: restored.snapshot, input: { conversationId: cid, maxIterations } }).start();
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

  /** A conversation brought back from its log; effects it was waiting for start again. */
  static restore(conversationId: string, deps: SessionDeps, state: RestoredState): Session {
    const session = new Session(conversationId, deps, state);
    session.#effects.resume(state.snapshot);
    void session.#repairStateFact().catch((err) => deps.logger.warn('state repair failed', errorFields(err)));
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
  get history(): readonly StoredEvent[] {
    return this.#history;
  }
  /** The user who created the conversation. */
  get owner(): string | undefined {
    const first = this.#history[0];
    return first?.type === 'conversation_created' ? first.data.user : undefined;
  }
  get closed(): boolean {
    return this.#closed !== null;
  }

  /**
   * Stores the event and, once JetStream acknowledged it, applies it. Rejects
   * with IllegalTransitionError when the machine refuses it (nothing stored).
   */
  submit(event: NewEvent, msgId?: string): Promise<SubmitResult> {
    const job = this.#mailbox.then(() => this.#apply(event, msgId));
    this.#mailbox = job.catch(() => undefined);
    return job;
  }

  /** Stops the actor and the runtime. Pending and later submits are refused. */
  async close(reason = 'closed'): Promise<void> {
    this.#markClosed(reason);
    await this.#mailbox;
    this.#actor?.stop();
    await this.#effects.stop();
  }

  /** Replaces the runtime with a fresh one in the same workspace. */
  reconnectRuntime(): Promise<void> {
    return this.#effects.reconnect();
  }

  async #apply(proposal: NewEvent, msgId?: string): Promise<SubmitResult> {
    if (this.#closed !== null) throw new SessionClosedError(this.conversationId, this.#closed);
    const input = this.#stamp(proposal, this.#history.length);
    const machineEvent = toSessionEvent(input);
    const before = this.#actor?.getSnapshot();
    let derived: StoredEvent | null = null;
    if (machineEvent && before) {
      if (!before.can(machineEvent)) {
        const duplicate = msgId === undefined ? null : await this.#probeDuplicate(input, msgId);
        if (duplicate) return duplicate;
        throw new IllegalTransitionError(describe(machineEvent), agentStateOf(before));
      }
      derived = this.#stateFact(before, transition(this.#machine, before, machineEvent)[0], input.id);
    }
    const first = await this.#append(input, msgId);
    if (first.duplicate) return first;
    if (input.type === 'runtime_status') this.#runtimeStatus = input.data.status;
    if (input.type === 'conversation_created') {
      this.#actor = createActor(this.#machine, {
        input: { conversationId: this.conversationId, maxIterations: input.data.max_iterations },
      }).start();
    } else if (machineEvent) {
      this.#actor?.send(machineEvent);
    }
    if (derived) await this.#append(derived);
    return first;
  }

  #stateFact(before: SessionSnapshot, after: SessionSnapshot, cause: number): StoredEvent | null {
    const state = agentStateOf(after);
    if (state === agentStateOf(before)) return null;
    const reason = state === 'error' ? after.context.error : null;
    return this.#stamp(
      {
        source: 'environment',
        type: 'agent_state_changed',
        data: reason ? { state, reason } : { state },
        cause,
      },
      cause + 1,
    );
  }

  /** Appends one event; any fault other than a refused duplicate closes the session so it is reloaded from the log. */
  async #append(event: StoredEvent, msgId?: string): Promise<SubmitResult> {
    try {
      const result = await this.#deps.log.append(event, { expectedLastSeq: this.#lastSeq, msgId });
      if (result.duplicate) return result;
      this.#lastSeq = result.seq;
      this.#history.push(event);
      this.#deps.feed.publishEvent(this.conversationId, { seq: result.seq, event } satisfies LoggedEvent);
      return result;
    } catch (err) {
      const reason = err instanceof VersionConflictError ? 'another writer appended to it' : 'the event log failed';
      this.#markClosed(reason);
      this.#deps.logger.error('append failed; session closed', { conversation_id: this.conversationId, ...errorFields(err) });
      throw err instanceof VersionConflictError ? new SessionClosedError(this.conversationId, reason, { cause: err }) : err;
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
      return result.duplicate ? result : null;
    } catch (err) {
      if (err instanceof VersionConflictError) return null;
      throw err;
    }
  }

  /** After a crash between an event and its state fact, the log can lag the fold by one fact. */
  async #repairStateFact(): Promise<void> {
    const snapshot = this.#actor?.getSnapshot();
    if (!snapshot) return;
    const lastFact = this.#history.findLast((e) => e.type === 'agent_state_changed');
    const recorded = lastFact?.type === 'agent_state_changed' ? lastFact.data.state : 'loading';
    const state = agentStateOf(snapshot);
    if (recorded === state) return;
    await this.#mailboxed(() =>
      this.#append(this.#stamp({ source: 'environment', type: 'agent_state_changed', data: { state } }, this.#history.length)),
    );
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

  #markClosed(reason: string): void {
    if (this.#closed !== null) return;
    this.#closed = reason;
    this.#deps.onClosed?.(this, reason);
  }
}

function describe(event: SessionEvent): string {
  switch (event.type) {
    case 'user.message':
      return 'send a message';
    case 'user.run':
      return 'run a command';
    case 'user.change_state':
      return `change the agent state to ${event.state}`;
    default:
      return `apply ${event.type}`;
  }
}
