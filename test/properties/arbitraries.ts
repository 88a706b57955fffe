import fc from 'fast-check';
import type { SessionEvent, SessionInput, SessionSnapshot } from '../../machines/index.ts';
import { AgentState, PassivationReason, type UserAction } from '../../protocol/index.ts';
import type { ConversationOptions, HarnessOptions, PassivationPlan } from './harness.ts';

export const agentState = fc.constantFrom(...AgentState.options);

/** Mostly the states a user may ask for, sometimes any. */
const requestedState = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom<AgentState>('running', 'paused', 'stopped', 'user_confirmed', 'user_rejected'),
  },
  { weight: 1, arbitrary: agentState },
);

/** Every kind of user action; change_agent_state names any state, so most are illegal where they land. */
export const userAction: fc.Arbitrary<UserAction> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .constantFrom('hello', 'help', '!echo one', '!echo two', '!', 'and then?')
      .map((content) => ({ type: 'message' as const, content })),
  },
  { weight: 2, arbitrary: fc.constantFrom('echo run', 'true').map((command) => ({ type: 'run' as const, command })) },
  { weight: 3, arbitrary: requestedState.map((state) => ({ type: 'change_agent_state' as const, state })) },
  { weight: 1, arbitrary: fc.constant({ type: 'reconnect_runtime' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'interrupt' as const }) },
);

export type HostOp =
  | { kind: 'act'; action: UserAction }
  /** Two actions sent at once, without waiting for the first. */
  | { kind: 'act_pair'; actions: [UserAction, UserAction] }
  /** Lets the oldest waiting agent step or command go on; an agent step may fail instead. */
  | { kind: 'release'; what: 'agent' | 'command'; outcome: 'succeed' | 'fail' }
  | { kind: 'settle' }
  | { kind: 'kill_runtime' }
  | ({ kind: 'passivate' } & PassivationPlan);

const hostOps = {
  act: userAction.map((action): HostOp => ({ kind: 'act', action })),
  actPair: fc.tuple(userAction, userAction).map((actions): HostOp => ({ kind: 'act_pair', actions })),
  release: fc.oneof(
    { weight: 5, arbitrary: fc.constant<HostOp>({ kind: 'release', what: 'agent', outcome: 'succeed' }) },
    { weight: 1, arbitrary: fc.constant<HostOp>({ kind: 'release', what: 'agent', outcome: 'fail' }) },
    { weight: 3, arbitrary: fc.constant<HostOp>({ kind: 'release', what: 'command', outcome: 'succeed' }) },
  ),
  settle: fc.constant<HostOp>({ kind: 'settle' }),
  kill: fc.constant<HostOp>({ kind: 'kill_runtime' }),
  passivate: fc
    .record({
      how: fc.constantFrom('idle' as const, 'restart' as const, 'crash' as const),
      dropSnapshot: fc.boolean(),
      eager: fc.boolean(),
    })
    .map((plan): HostOp => ({ kind: 'passivate', ...plan })),
};

export const conversationOptions = (maxIterations: fc.Arbitrary<number>): fc.Arbitrary<ConversationOptions> =>
  fc.record({
    initialMessage: fc.option(fc.constantFrom('hello', '!echo start'), { nil: null }),
    confirmationMode: fc.boolean(),
    maxIterations,
  });

export const harnessOptions: fc.Arbitrary<HarnessOptions> = fc.record({
  instantCommands: fc.boolean(),
  snapshotEvery: fc.integer({ min: 1, max: 40 }),
});

/** A live-session script: actions, gate releases (so actions land mid-step), settles and runtime deaths. */
export const liveScenario = fc.record({
  harness: harnessOptions,
  conversation: conversationOptions(fc.integer({ min: 1, max: 12 })),
  ops: fc.array(
    fc.oneof(
      { weight: 6, arbitrary: hostOps.act },
      { weight: 2, arbitrary: hostOps.actPair },
      { weight: 4, arbitrary: hostOps.release },
      { weight: 2, arbitrary: hostOps.settle },
      { weight: 1, arbitrary: hostOps.kill },
    ),
    { maxLength: 40, size: 'max' },
  ),
  /** Where to break a copy of the final log, to show the log checker catches it. */
  corruptAt: fc.nat(),
});

/**
 * A script with passivation points. No runtime deaths (a dead runtime and a
 * stopped one differ by design), and an iteration limit that retried steps
 * cannot reach.
 */
export const passivationScenario = fc.record({
  harness: harnessOptions,
  conversation: conversationOptions(fc.constant(10_000)),
  ops: fc.array(
    fc.oneof(
      { weight: 6, arbitrary: hostOps.act },
      { weight: 1, arbitrary: hostOps.actPair },
      { weight: 4, arbitrary: hostOps.release },
      { weight: 2, arbitrary: hostOps.settle },
      { weight: 3, arbitrary: hostOps.passivate },
    ),
    { maxLength: 40, size: 'max' },
  ),
});

/** Kinds of machine events; a step prefers one kind, so runs are not drowned in always-accepted runtime events. */
export type EventKind = 'runtime' | 'runtime_lost' | 'user' | 'agent' | 'command' | 'deadline' | 'lifecycle';

/** Raw choices for one machine step; `machineEventCandidates` turns them into events for the current snapshot. */
export interface MachineStep {
  prefer: EventKind;
  pick: number;
  state: AgentState;
  cause: 'step' | 'command' | 'stale' | 'none';
  needsConfirmation: boolean;
  deadline: 'start' | 'retry';
  lateBy: number;
  reason: PassivationReason;
  close: boolean;
  alsoRefused: number | null;
}

const weighted = <T>(...choices: Array<[number, T]>): fc.Arbitrary<T> =>
  fc.oneof(...choices.map(([weight, value]) => ({ weight, arbitrary: fc.constant(value) })));

export const machineStep: fc.Arbitrary<MachineStep> = fc.record({
  prefer: weighted<EventKind>(
    [2, 'runtime'],
    [1, 'runtime_lost'],
    [4, 'user'],
    [6, 'agent'],
    [2, 'command'],
    [1, 'deadline'],
    [2, 'lifecycle'],
  ),
  pick: fc.nat(),
  state: requestedState,
  cause: weighted([8, 'step' as const], [3, 'command' as const], [1, 'stale' as const], [1, 'none' as const]),
  needsConfirmation: fc.boolean(),
  deadline: fc.constantFrom('start' as const, 'retry' as const),
  lateBy: fc.integer({ min: -1, max: 2 }),
  reason: fc.constantFrom(...PassivationReason.options),
  // Closing ends the conversation for good: rare, so runs go on long enough to matter.
  close: fc.integer({ min: 0, max: 24 }).map((n) => n === 0),
  alsoRefused: fc.option(fc.nat(), { nil: null }),
});

export const machineInput: fc.Arbitrary<SessionInput> = fc.record({
  conversationId: fc.constant('c1'),
  user: fc.constant('u'),
  maxIterations: fc.integer({ min: 1, max: 6 }),
  maxBudget: fc.option(fc.constantFrom(0.5, 1, 2), { nil: null }),
  maxRateLimitRetries: fc.integer({ min: 0, max: 3 }),
  maxAttempts: fc.constantFrom(null, 1, 3),
  confirmationMode: fc.boolean(),
  doubleTexting: fc.constantFrom('enqueue' as const, 'interrupt' as const, 'reject' as const),
  startDeadline: fc.option(fc.constant(5_000), { nil: null }),
});

/** A pure machine run: the machine's input and up to 80 steps. */
export const machineRun = fc.tuple(machineInput, fc.array(machineStep, { maxLength: 80, size: 'max' }));

/** One candidate of every machine event type, with parameters from the step and the snapshot's context. */
export function machineEventCandidates(
  snapshot: SessionSnapshot,
  eventId: number,
  step: MachineStep,
): Array<{ kind: EventKind; event: SessionEvent }> {
  const { context } = snapshot;
  const cause = {
    step: context.stepCause ?? undefined,
    command: context.pendingCommand?.eventId,
    stale: Math.max(0, eventId - 2),
    none: undefined,
  }[step.cause];
  const at = (context.deadline?.at ?? 5_000) + step.lateBy;
  const of = (kind: EventKind, ...events: SessionEvent[]) => events.map((event) => ({ kind, event }));
  return [
    ...of(
      'runtime',
      { type: 'runtime.starting', eventId },
      { type: 'runtime.connecting', eventId },
      { type: 'runtime.setting_up', eventId },
      { type: 'runtime.connected', eventId },
      { type: 'runtime.stopped', eventId },
    ),
    ...of('runtime_lost', { type: 'runtime.disconnected', eventId, reason: 'the runtime exited (signal SIGKILL)' }),
    ...of(
      'user',
      { type: 'user.message', eventId },
      { type: 'user.run', eventId, command: 'ls' },
      { type: 'user.change_state', eventId, state: step.state },
      { type: 'user.reconnect_runtime', eventId },
      { type: 'user.interrupt', eventId },
    ),
    ...of(
      'agent',
      { type: 'agent.message', eventId, cause },
      { type: 'agent.message', eventId, cause: context.cutStep ?? cause, interrupted: true },
      { type: 'agent.run', eventId, cause, command: 'make test', needsConfirmation: step.needsConfirmation },
      { type: 'agent.finish', eventId, cause },
      { type: 'agent.failed', eventId, cause, reason: 'the agent failed: boom' },
      { type: 'agent.rate_limited', eventId, cause, reason: 'slow down', retryAt: eventId * 1_000 },
      { type: 'agent.usage', eventId, cost: 0.3 },
    ),
    ...of('command', { type: 'command.finished', eventId, cause }),
    ...of('deadline', { type: 'deadline.passed', eventId, name: step.deadline, at, reason: 'deadline' }),
    ...of(
      'lifecycle',
      { type: 'session.passivate', eventId, reason: step.reason },
      { type: 'session.rehydrate', eventId },
      ...(step.close ? [{ type: 'session.close', eventId, reason: 'deleted' } as const] : []),
    ),
  ];
}

/** The step's event among those the snapshot accepts: of the preferred kind when there is one. */
export function chooseAccepted(
  snapshot: SessionSnapshot,
  eventId: number,
  step: MachineStep,
): { accepted: SessionEvent | undefined; refused: SessionEvent[] } {
  const candidates = machineEventCandidates(snapshot, eventId, step).map((c) => ({ ...c, ok: snapshot.can(c.event) }));
  const accepted = candidates.filter((c) => c.ok);
  const preferred = accepted.filter((c) => c.kind === step.prefer);
  // Without one of the preferred kind, prefer events that move the conversation on.
  const onward = accepted.filter((c) => c.kind !== 'runtime_lost' && c.kind !== 'lifecycle' && c.kind !== 'deadline');
  const pool = preferred.length > 0 ? preferred : onward.length > 0 ? onward : accepted;
  return {
    accepted: pool[step.pick % Math.max(1, pool.length)]?.event,
    refused: candidates.filter((c) => !c.ok).map((c) => c.event),
  };
}

/** A script brought to a quiet point, then one action sent while an idle passivation is under way. */
export const raceScenario = fc.record({
  harness: harnessOptions,
  conversation: conversationOptions(fc.constant(10_000)),
  ops: fc.array(
    fc.oneof(
      { weight: 3, arbitrary: hostOps.act },
      { weight: 2, arbitrary: hostOps.release },
      { weight: 1, arbitrary: hostOps.settle },
    ),
    {
      maxLength: 12,
    },
  ),
  action: userAction,
  /** Microtasks between the start of the passivation and the action: sweeps every stage of leaving. */
  ticks: fc.integer({ min: 0, max: 40 }),
});
