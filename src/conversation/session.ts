import {
  agentStateOf,
  decide,
  isBusy,
  sessionMachine,
  type Deadline,
  type DecisionInput,
  type SessionSnapshot,
} from '../../machines/index.ts';
import type {
  AgentState,
  EventOf,
  PassivationReason,
  RuntimeStatus,
  StoredEvent,
  UserAction,
} from '../../protocol/index.ts';
import type { AgentContext } from '../agent/index.ts';
import type { CheckpointStore, SnapshotStore } from '../store/index.ts';
import type { EffectDeps } from './effectRunner.ts';
import { IllegalTransitionError, SessionClosedError } from '../errors.ts';
import { secretMasker, type Masker } from './secretMasker.ts';
import { SessionEffects } from './sessionEffects.ts';
import type { SessionIndexHook } from './sessionIndex.ts';
import { SessionLog, type SubmitResult } from './sessionLog.ts';

export type { SubmitResult } from './sessionLog.ts';

export interface SessionDeps extends EffectDeps {
  snapshots: SnapshotStore;
  /** Write a snapshot every this many events (besides passivation). */
  snapshotEvery: number;
  checkpoints: CheckpointStore;
  /** Write a checkpoint each time the conversation's event count passes a multiple of this. */
  checkpointEvery: number;
  /** How long closing waits for a session that is still starting. */
  startWaitMs: number;
  /** Called after every decision took effect, with the snapshot before it. */
  onApplied?: (session: Session, before: SessionSnapshot | undefined) => void;
  /** Called once when the session can no longer write (conflict, store fault, close). */
  onClosed?: (session: Session, reason: string) => void;
  /** The conversation index, told before each decision is appended and after it took effect. */
  index?: SessionIndexHook;
}

/** What a session is rebuilt from. `history` is null when it came from a snapshot (the agent's context is then built from the log on demand). */
export interface RestoredState {
  snapshot: SessionSnapshot;
  lastSeq: number;
  nextEventId: number;
  history: StoredEvent[] | null;
  /** The last `agent_state_changed` among the events read, if any. */
  recordedState: AgentState | undefined;
}

type CreatedData = Omit<EventOf<'conversation_created'>['data'], 'machine_version'>;

/**
 * One live conversation: the session machine's actor, hosted as a mailbox over
 * its snapshot. Every change is one job: read the snapshot, ask the decider
 * (`machines/decide.ts`) which events to store and where they lead, append
 * them, adopt the state they lead to once JetStream acknowledged them, then run
 * what that state asks for (`effectsOf`). The machine is stepped once per
 * event, by the decider (machines/step.ts, as a fold is); effects run outside the
 * mailbox and their results come back as decider inputs.
 */
export class Session {
  readonly conversationId: string;
  readonly #deps: SessionDeps;
  readonly #log: SessionLog;
  readonly #effects: SessionEffects;
  readonly #mask: Masker;
  /** The machine's state as of `lastSeq`: the decider's, adopted once JetStream acknowledged its events. */
  #snapshot: SessionSnapshot | undefined;
  #mailbox: Promise<unknown> = Promise.resolve();
  #closed: string | null = null;
  /** Snapshot and checkpoint writes under way: closing waits for them, so a purge after it finds them all. */
  readonly #writes = new Set<Promise<void>>();

  private constructor(conversationId: string, deps: SessionDeps, restored?: RestoredState) {
    this.conversationId = conversationId;
    this.#deps = deps;
    this.#log = new SessionLog(conversationId, deps, restored, (reason) => this.#markClosed(reason));
    this.#mask = secretMasker(Object.values(deps.secrets));
    this.#effects = new SessionEffects(
      {
        conversationId,
        agentContext: () => this.agentContext(),
        decide: (input) => this.decide(input),
        runtimeCause: () => this.snapshot?.context.runtimeCause ?? 0,
        runtimeLost: () => this.snapshot?.context.runtimeLost ?? null,
      },
      deps,
      (deadline) => void this.#deadlinePassed(deadline),
    );
    this.#snapshot = restored?.snapshot;
  }

  /** A new conversation: stores its creation record, then starts what its first state asks for. */
  static async create(conversationId: string, deps: SessionDeps, data: CreatedData): Promise<Session> {
    const session = new Session(conversationId, deps);
    await session.#first({ type: 'create', conversationId, data });
    return session;
  }

  /**
   * A conversation brought back into memory: stores `session_rehydrated` (and
   * a state fact a crash cut off, and `machine_upgraded` for an older log),
   * then runs what the state asks for, as a live session would: a pending
   * agent step is asked again, a command that was out is reported interrupted.
   */
  static async restore(
    conversationId: string,
    deps: SessionDeps,
    state: RestoredState,
    from: 'snapshot' | 'log',
    folded: number,
  ): Promise<Session> {
    const session = new Session(conversationId, deps, state);
    await session.decide({ type: 'rehydrate', from, folded, recordedState: state.recordedState });
    return session;
  }

  /**
   * A fork, on its copied events (`state`): stores `conversation_forked`, then
   * what coming back after a crash stores, and runs what the state asks for:
   * a pending agent step is asked again, a command that was out is reported
   * interrupted (never run again), a deadline already past fires at once.
   */
  static async fork(
    conversationId: string,
    deps: SessionDeps,
    state: RestoredState,
    parent: { conversationId: string; seq: number },
  ): Promise<Session> {
    const session = new Session(conversationId, deps, state);
    await session.#first({
      type: 'fork',
      parent: parent.conversationId,
      seq: parent.seq,
      folded: state.nextEventId,
      ...(state.recordedState !== undefined && { recordedState: state.recordedState }),
    });
    return session;
  }

  /**
   * Ends a conversation that is not in memory, from its loaded state: the
   * session is rebuilt only to decide and store `session_closed` (no effect
   * starts: an ended conversation asks for none), then closed.
   */
  static async endStored(
    conversationId: string,
    deps: SessionDeps,
    state: RestoredState,
    reason: string,
  ): Promise<void> {
    await new Session(conversationId, deps, state).#end(reason);
  }

  get snapshot(): SessionSnapshot | undefined {
    return this.#snapshot;
  }
  get state(): AgentState {
    const snapshot = this.snapshot;
    return snapshot ? agentStateOf(snapshot) : 'loading';
  }
  /** Works by itself (starting, running, rate limited): never passivated for idleness. */
  get busy(): boolean {
    const snapshot = this.snapshot;
    return snapshot ? isBusy(snapshot) : true;
  }
  get lastSeq(): number {
    return this.#log.lastSeq;
  }
  /** The id of the last stored event (-1: none). */
  get lastEventId(): number {
    return this.#log.nextEventId - 1;
  }
  /** Epoch ms of the last stored event (its `ts`): when the session last did anything. */
  get lastActivity(): number {
    return this.#log.lastActivity;
  }
  get runtimeStatus(): RuntimeStatus {
    return this.snapshot?.context.runtime ?? 'stopped';
  }
  /** The runtime died and no reconnect replaced it (from the log: it survives restarts). */
  get runtimeLost(): boolean {
    return (this.snapshot?.context.runtimeLost ?? null) !== null;
  }
  /** Epoch ms since which the agent is running (a stored event's time), or null. */
  get runningSince(): number | null {
    return this.snapshot?.context.runningSince ?? null;
  }
  /** The user who created the conversation. */
  get owner(): string | undefined {
    return this.snapshot?.context.user;
  }
  get closed(): boolean {
    return this.#closed !== null;
  }

  /** The agent's context for this conversation, up to date with every stored event; built from the log the first time after a snapshot restore. */
  agentContext(): Promise<AgentContext> {
    return this.#log.agentContext((work) => this.#mailboxed(work));
  }

  /** A user's action. A retry with the same `clientId` is stored once. */
  act(action: UserAction, clientId?: string): Promise<SubmitResult> {
    return this.#mailboxed(() => this.#decideAndApply({ type: 'user_action', action }, clientId));
  }

  /**
   * Decides, stores and applies one input. Rejects with IllegalTransitionError
   * when the decider refuses it (nothing stored).
   */
  decide(input: DecisionInput): Promise<SubmitResult> {
    return this.#mailboxed(() => this.#decideAndApply(input));
  }

  /**
   * Leaves memory: effects stop, then the decider's passivation is stored (a
   * command still out recorded as interrupted, the runtime as stopped,
   * `session_passivated`) and a snapshot written. A session still starting is
   * waited for (bounded by `startWaitMs`).
   */
  async passivate(reason: PassivationReason): Promise<void> {
    await this.#waitForStart();
    if (this.#closed !== null) return;
    await this.#effects.stop(`passivated (${reason})`);
    await this.#mailboxed(async () => {
      await this.#decideAndApply({ type: 'passivate', reason });
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

  /** Stops the actor, timers and the runtime. Pending and later inputs are refused. */
  async close(reason = 'closed'): Promise<void> {
    await this.#waitForStart();
    this.#markClosed(reason);
    await this.#mailbox;
    await this.#effects.stop(reason);
    await Promise.allSettled(this.#writes);
  }

  async #end(reason: string): Promise<void> {
    try {
      await this.decide({ type: 'close', reason });
    } finally {
      await this.close(reason);
    }
  }

  /** A new conversation's first decision; when it fails (its record not written) the session closes. */
  async #first(input: DecisionInput): Promise<void> {
    try {
      await this.decide(input);
    } catch (err) {
      await this.close('its first decision failed');
      throw err;
    }
  }

  /** Read, decide, append, apply: the only way anything changes. */
  async #decideAndApply(input: DecisionInput, msgId?: string): Promise<SubmitResult> {
    if (this.#closed !== null) throw new SessionClosedError(this.conversationId, this.#closed);
    const before = this.snapshot;
    // Secrets reach the runtime's environment, never the log (nor, so, any frame or REST answer).
    const decision = decide(before, this.#mask(input), {
      conversationId: this.conversationId,
      nextEventId: this.#log.nextEventId,
      now: this.#deps.clock(),
    });
    if (!decision.ok) {
      const duplicate = msgId === undefined ? null : await this.#log.probeDuplicate(msgId);
      if (duplicate) return duplicate;
      if (this.#log.isDebug)
        this.#log.debug('refused', {
          input: inputName(input),
          code: decision.code,
          state: decision.state,
          reason: decision.reason,
        });
      if (decision.code === 'ENDED') throw new SessionClosedError(this.conversationId, decision.reason);
      throw new IllegalTransitionError(decision.reason, decision.state);
    }
    if (this.#log.isDebug)
      this.#log.debug('decided', {
        input: inputName(input),
        from: this.state,
        to: agentStateOf(decision.snapshot),
        events: decision.events.map((e) => e.type),
      });
    await this.#deps.index?.beforeAppend(before, decision.snapshot, decision.events);
    let first: SubmitResult | undefined;
    for (const event of decision.events) {
      const result = await this.#log.append(event, first === undefined ? msgId : undefined);
      // A retried action stored once already: nothing of this decision is stored.
      if (result.duplicate) return result;
      first ??= result;
    }
    // Persist, then apply: the state the decider computed takes effect once every event of it is
    // acknowledged. (An append that fails closes the session: it is reloaded from the log.)
    this.#snapshot = decision.snapshot;
    this.#afterDecision(before);
    if (this.#log.checkpointDue(decision.events[0]!.id, decision.events.at(-1)!.id)) this.#checkpointLater();
    await this.#deps.index?.afterApply(decision.snapshot, decision.events);
    return first!;
  }

  #afterDecision(before: SessionSnapshot | undefined): void {
    const snapshot = this.snapshot;
    if (!snapshot) return;
    this.#deps.onApplied?.(this, before);
    // What the new state asks for, run the same way as after a fold.
    if (this.#closed === null) this.#effects.follow(snapshot);
    if (this.#log.snapshotDue && snapshot.status === 'active') this.#snapshotLater();
  }

  async #deadlinePassed(deadline: Deadline): Promise<void> {
    try {
      await this.decide({ type: 'deadline', name: deadline.name });
    } catch (err) {
      // A deadline the state no longer keeps (it moved on meanwhile) is refused: nothing to do.
      if (err instanceof IllegalTransitionError || err instanceof SessionClosedError) return;
      this.#log.warn('deadline not stored', err);
    }
  }

  /** Writes a periodic snapshot; an ended conversation (about to be purged) gets none. */
  #snapshotLater(): void {
    this.#track(this.#writeSnapshot().catch((err) => this.#log.warn('snapshot failed', err)));
  }

  /** Writes a checkpoint of the state just applied; an ended conversation (about to be purged) gets none. */
  #checkpointLater(): void {
    const snapshot = this.#snapshot;
    if (snapshot?.status !== 'active') return;
    this.#track(
      this.#log
        .writeCheckpoint(sessionMachine.getPersistedSnapshot(snapshot))
        .catch((err) => this.#log.warn('checkpoint failed', err)),
    );
  }

  #track(write: Promise<void>): void {
    this.#writes.add(write);
    void write.finally(() => this.#writes.delete(write));
  }

  async #writeSnapshot(): Promise<void> {
    const snapshot = this.#snapshot;
    if (snapshot) await this.#log.writeSnapshot(sessionMachine.getPersistedSnapshot(snapshot));
  }

  async #waitForStart(): Promise<void> {
    const until = performance.now() + this.#deps.startWaitMs;
    while (this.state === 'loading' && this.#closed === null && performance.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  #mailboxed<T>(work: () => Promise<T>): Promise<T> {
    const job = this.#mailbox.then(work);
    this.#mailbox = job.catch(() => undefined);
    return job;
  }

  #markClosed(reason: string): void {
    if (this.#closed !== null) return;
    this.#closed = reason;
    this.#effects.clearDeadline();
    this.#deps.onClosed?.(this, reason);
  }
}

/** An input in a word or two, for debug lines: `user message`, `agent_answered`, `passivate`... */
function inputName(input: DecisionInput): string {
  return input.type === 'user_action' ? `user ${input.action.type}` : input.type;
}
