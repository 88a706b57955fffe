import { setImmediate as nextMacrotask } from 'node:timers/promises';
import { expect } from 'vitest';
import { transition } from 'xstate';
import {
  agentStateOf,
  foldEvents,
  sessionMachine,
  type SessionEvent,
  type SessionSnapshot,
} from '../../machines/index.ts';
import { scriptedAgent, type Agent } from '../../src/agent/index.ts';
import type { StoredEvent, UserAction } from '../../protocol/index.ts';
import { echoHandler, memoryRuntimeProvider, type MemoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { IllegalTransitionError } from '../../src/errors.ts';
import { readStoredState, type Session } from '../../src/conversation/index.ts';
import type { NodeHost } from '../../src/host/index.ts';
import {
  memoryConversationStore,
  memoryEventLog,
  memorySnapshotStore,
  type MemoryConversationStore,
  type MemoryEventLog,
  type MemorySnapshotStore,
} from '../../src/store/index.ts';
import { Gates, type GateKind } from './gates.ts';
import { expectSame, LogChecker, persisted } from './logChecks.ts';
import { memoryHost } from '../support/memoryHost.ts';

export const USER = 'local';

export interface HarnessOptions {
  /** Commands answer at once; otherwise each waits for a `release command`. */
  instantCommands: boolean;
  snapshotEvery: number;
}

export interface ConversationOptions {
  initialMessage: string | null;
  confirmationMode: boolean;
  maxIterations: number;
}

export type PassivationPlan = { how: 'idle' | 'restart' | 'crash'; dropSnapshot: boolean; eager: boolean };
export type PassivationDone = 'idle' | 'mid_step' | 'skipped';

/**
 * One conversation on a NodeHost over the in-memory twins (event log,
 * conversation and snapshot stores, memory runtime), with the scripted agent
 * behind gates, a deterministic clock and checks after every step. Restarts
 * and crashes replace the manager by a new one on the same stores.
 */
export class Harness {
  readonly log: MemoryEventLog = memoryEventLog();
  readonly conversations: MemoryConversationStore = memoryConversationStore();
  readonly snapshots: MemorySnapshotStore = memorySnapshotStore();
  readonly gates = new Gates();
  /** The log folded so far, with what is wrong with it. */
  readonly checker = new LogChecker();
  readonly runtimes: MemoryRuntimeProvider;
  readonly #agent: Agent;
  readonly #options: HarnessOptions;
  #time = Date.UTC(2026, 0, 1);
  #id: string | undefined;
  readonly #frozen: Array<{ manager: NodeHost; session: Session }> = [];
  #crashed = false;
  manager: NodeHost;
  /** User actions the session accepted so far. */
  acceptedActs = 0;

  constructor(options: HarnessOptions) {
    this.#options = options;
    const inner: Agent = scriptedAgent();
    this.#agent = {
      context: (conversationId) => {
        const context = inner.context(conversationId);
        return {
          observe: (event) => context.observe(event),
          step: async (input) => {
            await this.gates.wait('agent', this.acceptedActs, input?.signal);
            return context.step(input);
          },
        };
      },
    };
    this.runtimes = memoryRuntimeProvider(async (command, env) => {
      if (!options.instantCommands) await this.gates.wait('command', this.acceptedActs);
      return echoHandler(command, env);
    });
    this.manager = this.#newManager();
  }

  get id(): string {
    if (this.#id === undefined) throw new Error('no conversation yet');
    return this.#id;
  }

  #newManager(): NodeHost {
    return memoryHost({
      log: this.log,
      conversations: this.conversations,
      snapshots: this.snapshots,
      runtimes: this.runtimes,
      agentFor: () => this.#agent,
      // Sweeps never fire during a run: passivation happens only where the script says.
      limits: { closeDelayMs: 1e9, idleMs: 1e9, snapshotEvery: this.#options.snapshotEvery, startTimeoutMs: 60_000 },
      clock: () => new Date(this.#time++),
      newId: () => 'conv-1',
    });
  }

  async create(options: ConversationOptions): Promise<void> {
    const { conversation_id } = await this.manager.commands.create(USER, {
      ...(options.initialMessage !== null && { initial_message: options.initialMessage }),
      confirmation_mode: options.confirmationMode,
      max_iterations: options.maxIterations,
      secrets: {},
    });
    this.#id = conversation_id;
    await this.drain();
  }

  async events(): Promise<StoredEvent[]> {
    return (await this.log.read(this.id)).items.map((i) => i.event);
  }

  /** Lets every piece of work that does not wait at a gate run to its end. */
  async drain(): Promise<void> {
    let seen = -1;
    for (let round = 0; round < 100; round++) {
      await nextMacrotask();
      const now = await this.log.lastSeq(this.id);
      if (now === seen) return;
      seen = now;
    }
    throw new Error('the session never went quiet');
  }

  /** Opens gates one at a time until nothing waits: the session has nothing left to do. */
  async settle(): Promise<void> {
    for (let i = 0; i < 1000; i++) {
      await this.drain();
      if (!this.gates.release()) return;
    }
    throw new Error('the agent never stopped working');
  }

  async release(kind: GateKind, outcome: 'succeed' | 'fail' = 'succeed'): Promise<void> {
    this.gates.release(kind, outcome);
    await this.drain();
  }

  /** The session's last process crashed and no new one has loaded it yet: the log need not end passivated. */
  get crashed(): boolean {
    return this.#crashed;
  }

  /** The live session, without bringing a passivated one back. */
  async live(): Promise<Session | undefined> {
    if (!this.manager.isLive(this.id)) return undefined;
    this.#crashed = false;
    return this.manager.session(this.id, USER);
  }

  /** Sends one action; refusals (IllegalTransitionError) are an outcome, any other error fails the run. */
  async #send(action: UserAction): Promise<{ outcome: 'accepted' | 'refused'; refusal: string }> {
    try {
      await this.manager.commands.act(this.id, USER, action);
      this.acceptedActs += 1;
      return { outcome: 'accepted', refusal: '' };
    } catch (err) {
      if (!(err instanceof IllegalTransitionError)) throw err;
      return { outcome: 'refused', refusal: err.message };
    }
  }

  /**
   * Sends user actions at once (in this order, without waiting) and checks
   * the host's answers against the fold: each is accepted exactly when the
   * fold after the accepted ones before it `can` take it; the accepted ones
   * are stored once each, in order; refused ones store nothing (nor any
   * user event when the action brought the session back into memory).
   */
  async act(...actions: UserAction[]): Promise<void> {
    const before = await this.events();
    const wasLive = this.manager.isLive(this.id);
    let fold = inMemory(this.checker.feed(before), before.length);
    const expected = actions.map((action) => {
      const event = userEventOf(action, before.length + 1);
      const ok = fold.can(event);
      if (ok) [fold] = transition(sessionMachine, fold, event);
      return ok;
    });
    const answers = await Promise.all(actions.map((action) => this.#send(action)));
    if (answers.every((a) => a.outcome === 'refused') && wasLive) {
      expect(await this.events(), 'a refused action stored something').toEqual(before);
    }
    await this.drain();
    const stored = (await this.events()).slice(before.length).filter((e) => e.source === 'user');
    const said = (ok: boolean) => (ok ? 'accepted' : 'refused');
    expect(
      answers.map((a) => a.outcome),
      `the fold's answers to ${JSON.stringify(actions)}`,
    ).toEqual(expected.map(said));
    const kept = actions.filter((_, i) => answers[i]!.outcome === 'accepted');
    expect(stored.map(userActionOf), 'the user events stored').toEqual(kept);
  }

  /**
   * Sends a user action while the session is leaving memory (an idle
   * passivation started `ticks` microtasks earlier, as the policy's sweep
   * does). The action meets either the session before it leaves or the one
   * that comes back; both are in the same agent state, so it must be
   * accepted exactly when the fold of the quiet log accepts it, and stored once.
   */
  async actWhileLeaving(action: UserAction, ticks: number): Promise<void> {
    const before = await this.events();
    const expected = inMemory(this.checker.feed(before), before.length).can(userEventOf(action, before.length));
    const leaving = this.manager.passivate(this.id, 'idle');
    for (let i = 0; i < ticks; i++) await Promise.resolve();
    const { outcome, refusal } = await this.#send(action);
    await leaving;
    await this.drain();
    const stored = (await this.events()).slice(before.length).filter((e) => e.source === 'user');
    expect(outcome, `the fold said ${expected ? 'accept' : 'refuse'} ${JSON.stringify(action)} ${refusal}`).toBe(
      expected ? 'accepted' : 'refused',
    );
    expect(stored.map(userActionOf)).toEqual(outcome === 'refused' ? [] : [action]);
  }

  /** Simulates the runtime process dying by itself. */
  async killRuntime(): Promise<void> {
    this.runtimes.created.at(-1)?.kill();
    await this.drain();
  }

  /**
   * Takes the session out of memory where that keeps the run comparable with
   * one that never left: when quiet (no work waiting, agent not busy), or
   * mid-step when the agent is thinking, nothing else waits and the user has
   * not acted since the step began (the retried step then sees the same
   * unanswered messages). A running command is never cut: its "interrupted"
   * observation would differ from the real output, by design.
   * `idle` passivates; `restart` shuts the manager down and starts a new one
   * on the same stores; `crash` starts a new one while the old one is frozen
   * (its pending work never finishes, it writes nothing more).
   */
  async leaveMemoryIfComparable(plan: PassivationPlan): Promise<PassivationDone> {
    const session = await this.live();
    if (!session?.snapshot) return 'skipped';
    const waiting = this.gates.waiting;
    const state = session.state;
    let done: PassivationDone;
    if (waiting.length === 0 && state !== 'loading' && state !== 'running' && state !== 'rate_limited') done = 'idle';
    else if (
      waiting.length === 1 &&
      waiting[0]!.kind === 'agent' &&
      waiting[0]!.actsAtCreation === this.acceptedActs &&
      session.snapshot.matches({ active: { running: 'thinking' } })
    ) {
      done = 'mid_step';
    } else return 'skipped';

    if (plan.how === 'idle') {
      await this.manager.passivate(this.id, 'idle');
    } else if (plan.how === 'restart') {
      await this.manager.shutdown();
      this.manager = this.#newManager();
    } else {
      this.gates.forget();
      this.#frozen.push({ manager: this.manager, session });
      this.#crashed = true;
      this.manager = this.#newManager();
    }
    const events = await this.events();
    if (plan.how !== 'crash') {
      expect(events.at(-1)).toMatchObject({
        type: 'session_passivated',
        data: { reason: plan.how === 'idle' ? 'idle' : 'shutdown', state },
      });
      expect((await this.snapshots.get(this.id))?.seq, 'the passivation snapshot is the latest').toBe(
        await this.log.lastSeq(this.id),
      );
    }
    await expectSnapshotLoadEqualsLogLoad(this);
    if (plan.dropSnapshot) await this.snapshots.delete(this.id);
    const from = (await this.snapshots.get(this.id)) ? 'snapshot' : 'log';

    if (plan.how !== 'idle') {
      // A session that was mid-step comes back by itself after a restart or a crash.
      const recovered = await this.manager.recover();
      if (done === 'mid_step') expect(recovered, 'recovered after a restart mid-step').toBe(1);
      // After a clean shutdown the log says exactly whether it was mid-task; after a
      // crash the last event may be one whose state fact is missing, so any non-fact counts.
      else if (plan.how === 'restart') expect(recovered, 'recovered after a restart while idle').toBe(0);
    }
    if (done === 'mid_step' || plan.eager) await this.manager.session(this.id, USER);
    await this.drain();
    if (this.manager.isLive(this.id)) {
      const back = (await this.events()).find((e, i) => i >= events.length && e.type === 'session_rehydrated');
      expect(back).toMatchObject({ data: { from } });
    }
    return done;
  }

  async dispose(): Promise<void> {
    await this.manager.shutdown();
    // Frozen "crashed" processes are let go only now, so they never write during the run.
    for (const { manager, session } of this.#frozen) {
      await session.release('crashed');
      await manager.shutdown();
    }
  }
}

function userEventOf(action: UserAction, eventId: number): SessionEvent {
  switch (action.type) {
    case 'reconnect_runtime':
      return { type: 'user.reconnect_runtime', eventId };
    case 'message':
      return { type: 'user.message', eventId };
    case 'run':
      return { type: 'user.run', eventId, command: action.command };
    case 'change_agent_state':
      return { type: 'user.change_state', eventId, state: action.state };
    case 'interrupt':
      return { type: 'user.interrupt', eventId };
  }
}

function userActionOf(event: StoredEvent): UserAction | StoredEvent {
  if (event.type === 'message') return { type: 'message', content: event.data.content };
  if (event.type === 'command') return { type: 'run', command: event.data.command };
  if (event.type === 'change_agent_state') return { type: 'change_agent_state', state: event.data.state };
  if (event.type === 'reconnect_runtime') return { type: 'reconnect_runtime' };
  if (event.type === 'interrupt') return { type: 'interrupt' };
  return event;
}

/** The fold as a user action finds it: brought back into memory first when passivated. */
function inMemory(fold: SessionSnapshot, nextId: number): SessionSnapshot {
  return fold.matches('passivated')
    ? transition(sessionMachine, fold, { type: 'session.rehydrate', eventId: nextId })[0]
    : fold;
}

/** The live actor, when in memory, equals the fold of the stored log; a passivated one is the fold's. */
export async function expectLiveEqualsFold(h: Harness, fold: SessionSnapshot): Promise<void> {
  const session = await h.live();
  if (session) {
    expect(session.snapshot, 'a live session has an actor').toBeDefined();
    expectSame(persisted(session.snapshot!), persisted(fold), 'live actor vs fold of the log');
    expect(session.state).toBe(agentStateOf(fold));
    expect(session.lastSeq).toBe(await h.log.lastSeq(h.id));
  } else if (!h.crashed) {
    expect(fold.value, 'a session out of memory folds to passivated').toBe('passivated');
  }
}

/**
 * Loading from the latest snapshot plus the events after it equals folding
 * the whole log: the fold the caller already has of its `events` events, or
 * (without one) loading with no snapshot at all.
 */
export async function expectSnapshotLoadEqualsLogLoad(
  h: Harness,
  known?: { fold: SessionSnapshot; events: number },
): Promise<void> {
  const fromSnapshot = await readStoredState(h.log, h.snapshots, h.id);
  expect(fromSnapshot).toBeDefined();
  if (known) {
    expectSame(persisted(fromSnapshot!.state.snapshot), persisted(known.fold), 'snapshot + tail vs fold of the log');
    expect(fromSnapshot!.state.lastSeq).toBe(await h.log.lastSeq(h.id));
    expect(fromSnapshot!.state.nextEventId, 'the next event id after a load').toBe(known.events);
    return;
  }
  const fromLog = await readStoredState(h.log, memorySnapshotStore(), h.id);
  expectSame(
    persisted(fromSnapshot!.state.snapshot),
    persisted(fromLog!.state.snapshot),
    'snapshot + tail vs whole-log fold',
  );
  expect(fromSnapshot!.state.lastSeq).toBe(fromLog!.state.lastSeq);
  expect(fromSnapshot!.state.nextEventId).toBe(fromLog!.state.nextEventId);
}

/** Every check that holds at any quiet point of a run. `full` also folds the whole log from scratch. */
export async function expectConsistent(h: Harness, full = false): Promise<void> {
  const events = await h.events();
  const fold = h.checker.feed(events);
  expect(h.checker.report()).toEqual([]);
  await expectLiveEqualsFold(h, fold);
  await expectSnapshotLoadEqualsLogLoad(h, { fold, events: events.length });
  if (full) {
    expectSame(persisted(foldEvents(events).snapshot), persisted(fold), 'one-pass fold vs step-by-step fold');
    await expectSnapshotLoadEqualsLogLoad(h);
  }
}
