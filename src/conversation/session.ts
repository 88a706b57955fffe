import {
  agentStateOf,
  decide,
  isBusy,
  type Deadline,
  type DecisionInput,
  type SessionSnapshot,
  type Streamed,
} from '../../machines/index.ts';
import type { AgentState, DeltaFrame, PassivationReason, UserAction } from '../../protocol/index.ts';
import type { AgentContext } from '../agent/index.ts';
import type { AppendResult, CheckpointStore, SnapshotStore } from '../store/index.ts';
import type { EffectDeps } from './effectRunner.ts';
import {
  AgentBusyError,
  ConversationNotFoundError,
  IllegalTransitionError,
  SessionUnavailableError,
} from '../errors.ts';
import { secretMasker, type Masker } from './secretMasker.ts';
import { streamedOf } from './deltaStream.ts';
import { SessionEffects } from './sessionEffects.ts';
import type { SessionIndexHook } from './sessionIndex.ts';
import type { StoredState } from './storedState.ts';
import { SessionLog } from './sessionLog.ts';

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
  /** Called once when the session is released and can no longer write (passivation, conflict, store fault, a lapsed lease). */
  onReleased?: (session: Session, reason: string) => void;
  /** The conversation index, told before each decision is appended and after it took effect. */
  index?: SessionIndexHook;
}

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
  /** Why the session was released (it writes nothing more), or null while it runs. */
  #released: string | null = null;

  private constructor(conversationId: string, deps: SessionDeps, stored?: StoredState) {
    this.conversationId = conversationId;
    this.#deps = deps;
    this.#log = new SessionLog(conversationId, deps, stored, (reason) => this.#markReleased(reason));
    this.#mask = secretMasker(Object.values(deps.secrets));
    this.#effects = new SessionEffects(
      {
        conversationId,
        agentContext: () => this.agentContext(),
        decide: (input) => this.decide(input),
        runtimeCause: () => this.snapshot?.context.runtimeCause ?? 0,
        runtimeLost: () => this.snapshot?.context.runtimeLost ?? null,
        repository: () => this.snapshot?.context.repository ?? null,
        toolsListed: () => this.#log.toolsListed((work) => this.#mailboxed(work)),
      },
      deps,
      (deadline) => void this.#deadlinePassed(deadline),
    );
    this.#snapshot = stored?.snapshot;
  }

  /**
   * A session in memory, from its first decision, which it stores before it
   * runs what the state asks for: `create` (a new conversation: its creation
   * record), `rehydrate` (back into memory: `session_rehydrated`, with a
   * state fact a crash cut off and `machine_upgraded` for an older log) or
   * `fork` (on its copied events: `conversation_forked`, then what coming back
   * after a crash stores). As a live session would, it then asks a pending
   * agent step again, reports a command that was out as interrupted (never
   * run again) and fires a deadline already past. When the first decision
   * fails (a new conversation's record not written), the session is released.
   */
  static async open(
    conversationId: string,
    deps: SessionDeps,
    stored: StoredState | undefined,
    first: Extract<DecisionInput, { type: 'create' | 'rehydrate' | 'fork' }>,
  ): Promise<Session> {
    const session = new Session(conversationId, deps, stored);
    try {
      await session.decide(first);
    } catch (err) {
      await session.release('its first decision failed');
      throw err;
    }
    return session;
  }

  /**
   * Ends a conversation that is not in memory, from its stored state: the
   * session is rebuilt only to decide and store `session_closed` (no effect
   * starts: an ended conversation asks for none), then released.
   */
  static async endStored(conversationId: string, deps: SessionDeps, state: StoredState, reason: string): Promise<void> {
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
  /** Epoch ms of the last stored event (its `ts`): when the session last did anything. */
  get lastActivity(): number {
    return this.#log.lastActivity;
  }
  /** Epoch ms since which the agent is running (a stored event's time), or null. */
  get runningSince(): number | null {
    return this.snapshot?.context.runningSince ?? null;
  }
  /** The user whose conversation it is. */
  get user(): string | undefined {
    return this.snapshot?.context.user;
  }
  /** Released: out of memory (or dropped), it writes nothing more. */
  get released(): boolean {
    return this.#released !== null;
  }

  /** The deltas of the agent step attempt the state waits for, from index 0, or null (none streamed, or the step is over). */
  currentDeltas(): readonly DeltaFrame[] | null {
    const deltas = this.#released === null ? this.#effects.currentDeltas() : null;
    const snapshot = this.snapshot;
    if (!deltas?.length || !snapshot?.matches({ active: { running: 'thinking' } })) return null;
    // Only the attempt the state still waits for: a stopped or failed one's deltas are not news.
    const { stepCause, attempt } = snapshot.context;
    return deltas[0]!.item_id === String(stepCause) && deltas[0]!.attempt === attempt ? deltas : null;
  }

  /** The agent's context for this conversation, up to date with every stored event; built from the log the first time after a rehydration from a snapshot. */
  agentContext(): Promise<AgentContext> {
    return this.#log.agentContext((work) => this.#mailboxed(work));
  }

  /**
   * A user's action. A retry with the same `clientId` is stored once. One that
   * may cut the agent's step (an interrupt, a stop, a message) carries what the
   * step's attempt streamed so far, read in the same job as the decision.
   */
  act(action: UserAction, clientId?: string): Promise<AppendResult> {
    return this.#mailboxed(() => {
      const streamed = action.type === 'run' || action.type === 'reconnect_runtime' ? undefined : this.#streamed();
      return this.#decideAndApply({ type: 'user_action', action, ...(streamed && { streamed }) }, clientId);
    });
  }

  /** What the current step's attempt has streamed (masked as its deltas are), or undefined. */
  #streamed(): Streamed | undefined {
    const deltas = this.currentDeltas();
    return deltas ? streamedOf(deltas) : undefined;
  }

  /**
   * Decides, stores and applies one input. Rejects with IllegalTransitionError
   * when the decider refuses it (nothing stored).
   */
  decide(input: DecisionInput): Promise<AppendResult> {
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
    if (this.#released !== null) return;
    await this.#effects.stop(`passivated (${reason})`);
    await this.#mailboxed(async () => {
      await this.#decideAndApply({ type: 'passivate', reason });
      // Released in this same job: an action queued behind it is refused as
      // unavailable and goes to the session that comes back, never to this one.
      this.#markReleased(`passivated (${reason})`);
      if (this.#snapshot) await this.#log.writeSnapshot(this.#snapshot);
    });
    await this.release(`passivated (${reason})`);
  }

  /**
   * Ends the conversation for good (it is being deleted): stores
   * `session_closed`, which takes the machine to its final state, then
   * is released. Followers of the log see it before the events are purged. A
   * session still starting is waited for (bounded by `startWaitMs`).
   */
  async end(reason: string): Promise<void> {
    await this.#waitForStart();
    await this.#end(reason);
  }

  /** Releases the session: effects, timers and the runtime stop; pending and later inputs are refused. */
  async release(reason: string): Promise<void> {
    await this.#waitForStart();
    this.#markReleased(reason);
    await this.#mailbox;
    await this.#effects.stop(reason);
    await this.#log.writesDone();
  }

  async #end(reason: string): Promise<void> {
    try {
      await this.decide({ type: 'close', reason });
    } finally {
      await this.release(reason);
    }
  }

  /** Read, decide, append, apply: the only way anything changes. */
  async #decideAndApply(input: DecisionInput, msgId?: string): Promise<AppendResult> {
    if (this.#released !== null) throw new SessionUnavailableError(this.conversationId, this.#released);
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
      if (this.#log.isDebug) this.#log.debug('refused', { input: inputName(input), ...decision });
      // Ended for good: it is being deleted.
      if (decision.code === 'ENDED') throw new ConversationNotFoundError(this.conversationId);
      if (decision.code === 'AGENT_BUSY') throw new AgentBusyError(decision.reason, decision.state);
      throw new IllegalTransitionError(decision.reason, decision.state);
    }
    // Synchronously after the decision read what was streamed: a cut attempt sends nothing more.
    this.#effects.decided(decision.snapshot);
    if (this.#log.isDebug)
      this.#log.debug('decided', {
        input: inputName(input),
        from: this.state,
        to: agentStateOf(decision.snapshot),
        events: decision.events.map((e) => e.type),
      });
    let appended: AppendResult;
    let stored = false;
    try {
      await this.#deps.index?.beforeAppend(before, decision.events);
      appended = await this.#log.appendAll(decision.events, msgId);
      stored = !appended.duplicate;
    } finally {
      // A cut attempt's held deltas: dropped once the cut is stored, else (a duplicate, a failure) sent after all.
      this.#effects.stored(stored);
    }
    if (appended.duplicate) return appended;
    // Persist, then apply: the state the decider computed takes effect once every event of it is
    // acknowledged. (An append that fails releases the session: it is rehydrated from the log.)
    this.#snapshot = decision.snapshot;
    this.#afterDecision(before);
    if (this.#log.checkpointDue(decision.events[0]!.id, decision.events.at(-1)!.id))
      this.#log.checkpointLater(decision.snapshot);
    await this.#deps.index?.afterApply(before, decision.events);
    return appended;
  }

  #afterDecision(before: SessionSnapshot | undefined): void {
    const snapshot = this.snapshot;
    if (!snapshot) return;
    this.#deps.onApplied?.(this, before);
    // What the new state asks for, run the same way as after a fold.
    if (this.#released === null) this.#effects.follow(snapshot);
    if (this.#log.snapshotDue) this.#log.snapshotLater(snapshot);
  }

  async #deadlinePassed(deadline: Deadline): Promise<void> {
    try {
      await this.decide({ type: 'deadline', name: deadline.name });
    } catch (err) {
      // A deadline the state no longer keeps (it moved on meanwhile) is refused: nothing to do.
      if (err instanceof IllegalTransitionError || err instanceof SessionUnavailableError) return;
      this.#log.warn('deadline not stored', err);
    }
  }

  async #waitForStart(): Promise<void> {
    const until = performance.now() + this.#deps.startWaitMs;
    while (this.state === 'loading' && this.#released === null && performance.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  #mailboxed<T>(work: () => Promise<T>): Promise<T> {
    const job = this.#mailbox.then(work);
    this.#mailbox = job.catch(() => undefined);
    return job;
  }

  #markReleased(reason: string): void {
    if (this.#released !== null) return;
    this.#released = reason;
    this.#effects.clearDeadline();
    this.#deps.onReleased?.(this, reason);
  }
}

/** An input in a word or two, for debug lines: `user message`, `agent_answered`, `passivate`... */
function inputName(input: DecisionInput): string {
  return input.type === 'user_action' ? `user ${input.action.type}` : input.type;
}
