import { and, assign, or, setup, type SnapshotFrom } from 'xstate';
import type { AgentState, RuntimeStatus } from '../src/protocol/index.ts';
import type { SessionEvent } from './sessionEvents.ts';

/** Bump when a change makes old persisted snapshots unsafe to restore. */
export const SESSION_MACHINE_VERSION = 3;

/** Rate-limited steps tried again before the agent gives up in error. */
export const DEFAULT_RATE_LIMIT_RETRIES = 5;

export interface SessionInput {
  conversationId: string;
  user: string;
  maxIterations: number;
  /** USD the agent may spend on LLM calls, or null for no limit. */
  maxBudget: number | null;
  maxRateLimitRetries: number;
  confirmationMode: boolean;
  /** Epoch ms by which the session must have started, or null for no limit. */
  startDeadline: number | null;
}

export interface PendingCommand {
  eventId: number;
  source: 'user' | 'agent';
  command: string;
}

/** A deadline is data, so it survives snapshots and is armed again after rehydration. */
export interface Deadline {
  name: 'start' | 'retry';
  at: number;
}

export interface SessionContext extends SessionInput {
  /** Agent steps taken so far. */
  iterations: number;
  /** USD spent on LLM calls so far. */
  spent: number;
  /** The allowance a user message grants again once a limit is reached. */
  iterationBudget: number;
  budget: number | null;
  /** Rate-limited attempts of the current step. */
  rateLimits: number;
  /** A user message the agent has not been asked about yet. */
  unreadMessage: boolean;
  /** id of the newest user message. */
  lastMessageId: number | null;
  /** id of the event that started the current agent step: its answer must carry it as `cause`. */
  stepCause: number | null;
  pendingCommand: PendingCommand | null;
  /** Why the agent is in error, when it is. */
  error: string | null;
  runtime: RuntimeStatus;
  deadline: Deadline | null;
  /** The agent state to come back to, while passivated. */
  resumeState: AgentState | null;
}

const NO_INPUT: SessionInput = {
  conversationId: '',
  user: '',
  maxIterations: 0,
  maxBudget: null,
  maxRateLimitRetries: 0,
  confirmationMode: false,
  startDeadline: null,
};
const wants = (state: AgentState) => ({ type: 'wants', params: { state } }) as const;
const resumesIn = (state: AgentState) => ({ type: 'resumesIn', params: { state } }) as const;

/** What a waiting agent does with a user's message or command. */
const startsWork = {
  'user.message': { target: '#session.active.running', actions: 'markUnread' },
  'user.run': { target: '#session.active.running.executing', actions: 'queueUserCommand' },
} as const;
const stops = { guard: wants('stopped'), target: '#session.active.stopped', actions: 'clearCommand' } as const;
/**
 * The output of a command the agent loop moved past (a user stopped it, then a
 * new message started the agent again): recorded in every state that may still
 * wait for it, so it is never refused and no stale pending command outlives it.
 */
const recordsLateOutput = { guard: 'answersPendingCommand', actions: 'clearCommand' } as const;
type StepAction = 'endStep' | 'resetRetries' | 'clearCommand' | 'clearDeadline' | 'forgetState';

/**
 * Another agent step when the limits allow it, else error with the limit's
 * reason. (A user message needs no check: it extends a reached limit.) Going
 * straight to `thinking` instead of through a transient state saves a
 * microstep, and so a snapshot, per step: folds are that much cheaper.
 */
const stepping = (when: 'pendingCommandWasAgents', actions: readonly StepAction[]) =>
  [
    {
      guard: and([when, 'hasIterationsLeft', 'hasBudgetLeft']),
      target: '#session.active.running.thinking',
      reenter: true,
      actions: [...actions],
    },
    {
      guard: and([when, 'hasBudgetLeft']),
      target: '#session.active.error',
      actions: [...actions, 'recordIterationLimit'],
    },
    { guard: when, target: '#session.active.error', actions: [...actions, 'recordBudgetLimit'] },
  ] as const;

/** Leaving memory keeps the agent state to come back to; never with a command still out. */
const passivates = (state: AgentState) =>
  ({
    guard: 'hasNoPendingCommand',
    target: '#session.passivated',
    actions: { type: 'rememberState', params: { state } },
  }) as const;

/**
 * The lifecycle of one conversation. Pure: effects are named actions that the
 * host provides (`startRuntime`, `askAgent`, `runCommand`); their results come
 * back as events, after they are stored. See docs/statecharts.md.
 */
export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
    tags: {} as AgentState,
  },
  actions: {
    startRuntime: () => {},
    askAgent: () => {},
    runCommand: () => {},
    // A user message after a limit stopped the agent gives it a fresh allowance
    // of the same size (iterations and budget alike).
    markUnread: assign(({ context, event }) => ({
      unreadMessage: true,
      lastMessageId: event.eventId,
      maxIterations:
        context.iterations >= context.maxIterations
          ? context.iterations + context.iterationBudget
          : context.maxIterations,
      maxBudget:
        context.maxBudget !== null && context.spent >= context.maxBudget
          ? context.spent + context.budget!
          : context.maxBudget,
    })),
    addCost: assign({ spent: ({ context, event }) => context.spent + (event.type === 'agent.usage' ? event.cost : 0) }),
    resetRetries: assign({ rateLimits: 0 }),
    runtimeStarting: assign({ runtime: 'starting' as const }),
    runtimeConnecting: assign({ runtime: 'connecting' as const }),
    runtimeSettingUp: assign({ runtime: 'setting_up' as const }),
    runtimeConnected: assign({ runtime: 'connected' as const }),
    runtimeStopped: assign({ runtime: 'stopped' as const }),
    runtimeLost: assign({ runtime: 'disconnected' as const }),
    // A step's cause is what the agent answers: the user message it has not
    // read yet, else the event that started the step (an observation, a resume,
    // a retry). A step retried after the session came back keeps its cause.
    // Two live steps never share one, so a late answer to an old step is refused.
    beginStep: assign({
      // A step the session left memory in the middle of is the same step when it
      // comes back: asked again, not counted again (as after a crash).
      iterations: ({ context, event }) =>
        event.type === 'session.rehydrate' && context.stepCause !== null ? context.iterations : context.iterations + 1,
      unreadMessage: false,
      stepCause: ({ context, event }) => {
        if (context.unreadMessage && context.lastMessageId !== null) return context.lastMessageId;
        if (event.type === 'session.rehydrate' && context.stepCause !== null) return context.stepCause;
        return event.eventId;
      },
      error: null,
    }),
    endStep: assign({ stepCause: null }),
    queueUserCommand: assign({
      pendingCommand: ({ event }) =>
        event.type === 'user.run' ? { eventId: event.eventId, source: 'user' as const, command: event.command } : null,
      error: null,
    }),
    queueAgentCommand: assign({
      pendingCommand: ({ event }) =>
        event.type === 'agent.run'
          ? { eventId: event.eventId, source: 'agent' as const, command: event.command }
          : null,
      stepCause: null,
    }),
    clearCommand: assign({ pendingCommand: null }),
    recordFailure: assign({
      error: ({ event }) => ('reason' in event ? event.reason : 'unknown error'),
      stepCause: null,
      deadline: null,
    }),
    recordIterationLimit: assign({
      error: ({ context }) =>
        `the agent reached its limit of ${context.maxIterations} iterations; send a message to let it go on`,
    }),
    recordBudgetLimit: assign({
      error: ({ context }) =>
        `the agent spent $${context.spent.toFixed(4)}, its budget is $${(context.maxBudget ?? 0).toFixed(4)}; send a message to let it go on`,
    }),
    recordRetriesOut: assign({
      error: ({ context, event }) =>
        `rate limited ${context.rateLimits + 1} times in a row (${'reason' in event ? event.reason : 'rate limited'}); giving up`,
      rateLimits: 0,
      stepCause: null,
      deadline: null,
    }),
    waitForRetry: assign({
      rateLimits: ({ context }) => context.rateLimits + 1,
      deadline: ({ event }) =>
        event.type === 'agent.rate_limited' ? { name: 'retry' as const, at: event.retryAt } : null,
      error: ({ event }) => ('reason' in event ? event.reason : null),
      stepCause: null,
    }),
    clearDeadline: assign({ deadline: null }),
    rememberState: assign((_, params: { state: AgentState }) => ({ resumeState: params.state })),
    forgetState: assign({ resumeState: null }),
  },
  guards: {
    hasUnreadMessage: ({ context }) => context.unreadMessage,
    hasMoreToDo: or(['hasUnreadMessage', ({ event }) => event.type === 'agent.message' && event.goesOn === true]),
    hasIterationsLeft: ({ context }) => context.iterations < context.maxIterations,
    hasBudgetLeft: ({ context }) => context.maxBudget === null || context.spent < context.maxBudget,
    hasRetriesLeft: ({ context }) => context.rateLimits < context.maxRateLimitRetries,
    hasPendingCommand: ({ context }) => context.pendingCommand !== null,
    hasNoPendingCommand: ({ context }) => context.pendingCommand === null,
    answersCurrentStep: ({ context, event }) =>
      'cause' in event && context.stepCause !== null && event.cause === context.stepCause,
    answersPendingCommand: ({ context, event }) =>
      'cause' in event && context.pendingCommand !== null && event.cause === context.pendingCommand.eventId,
    pendingCommandWasAgents: ({ context }) => context.pendingCommand?.source === 'agent',
    needsConfirmation: ({ context, event }) => context.confirmationMode && event.type === 'agent.run' && event.risky,
    deadlinePassed: ({ context, event }) =>
      event.type === 'deadline.passed' && context.deadline?.name === event.name && event.at >= context.deadline.at,
    wants: ({ event }, params: { state: AgentState }) =>
      event.type === 'user.change_state' && event.state === params.state,
    resumesIn: ({ context }, params: { state: AgentState }) => context.resumeState === params.state,
  },
}).createMachine({
  id: 'session',
  description: 'One conversation: its runtime and its agent loop, driven by stored events only.',
  // xstate's pure `transition()` and `initialTransition()` (the machine's tests
  // use them) build a throw-away actor without input for every call: give it a
  // context instead of a TypeError. Real actors, and so folds, always get an input.
  context: ({ input }) => ({
    ...(input ?? NO_INPUT),
    iterationBudget: (input ?? NO_INPUT).maxIterations,
    budget: (input ?? NO_INPUT).maxBudget,
    iterations: 0,
    spent: 0,
    rateLimits: 0,
    unreadMessage: false,
    lastMessageId: null,
    stepCause: null,
    pendingCommand: null,
    error: null,
    runtime: 'stopped',
    deadline: input?.startDeadline == null ? null : { name: 'start', at: input.startDeadline },
    resumeState: null,
  }),
  initial: 'starting',
  states: {
    starting: {
      description: 'The runtime is created, answers, and its workspace is set up; user messages wait.',
      tags: ['loading'],
      entry: 'startRuntime',
      initial: 'creating',
      states: {
        creating: {
          description: 'The runtime is being created.',
          on: { 'runtime.connecting': { target: 'connecting', actions: 'runtimeConnecting' } },
        },
        connecting: {
          description: 'Waiting for the new runtime to answer.',
          on: { 'runtime.setting_up': { target: 'setting_up', actions: 'runtimeSettingUp' } },
        },
        setting_up: { description: 'The workspace is being set up.' },
      },
      on: {
        'runtime.starting': { actions: 'runtimeStarting' },
        'runtime.connected': [
          { guard: 'hasUnreadMessage', target: 'active.running', actions: ['runtimeConnected', 'clearDeadline'] },
          { target: 'active.awaiting_user_input', actions: ['runtimeConnected', 'clearDeadline'] },
        ],
        'runtime.disconnected': { target: 'active.error', actions: ['runtimeLost', 'recordFailure'] },
        'user.message': { actions: 'markUnread' },
        'deadline.passed': { guard: 'deadlinePassed', target: 'active.error', actions: 'recordFailure' },
        'session.rehydrate': { actions: 'forgetState' },
        'session.close': { target: 'closed' },
      },
    },
    active: {
      description: 'The session is in memory; the agent works or waits.',
      initial: 'awaiting_user_input',
      on: {
        'runtime.starting': { actions: 'runtimeStarting' },
        'runtime.connecting': { actions: 'runtimeConnecting' },
        'runtime.setting_up': { actions: 'runtimeSettingUp' },
        'runtime.connected': { actions: 'runtimeConnected' },
        'runtime.stopped': { actions: 'runtimeStopped' },
        'runtime.disconnected': { target: '.error', actions: ['runtimeLost', 'recordFailure'] },
        'session.rehydrate': { actions: 'forgetState' },
        'session.close': { target: 'closed' },
      },
      states: {
        awaiting_user_input: {
          description: 'The agent waits for the user.',
          tags: ['awaiting_user_input'],
          on: {
            ...startsWork,
            'user.change_state': stops,
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('awaiting_user_input'),
          },
        },
        running: {
          description: 'The agent is working: thinking about its next action or running a command.',
          tags: ['running'],
          initial: 'thinking',
          on: {
            'user.message': { actions: 'markUnread' },
            'user.change_state': [
              { guard: wants('stopped'), target: 'stopped' },
              { guard: wants('paused'), target: 'paused' },
            ],
            'session.passivate': passivates('running'),
          },
          states: {
            thinking: {
              description: 'Waiting for the agent to choose its next action.',
              entry: ['beginStep', 'askAgent'],
              on: {
                'agent.message': [
                  // A message came while the agent worked, or the agent has more to say:
                  // another step, within the limits.
                  {
                    guard: and(['answersCurrentStep', 'hasMoreToDo', 'hasIterationsLeft', 'hasBudgetLeft']),
                    target: 'thinking',
                    reenter: true,
                    actions: ['endStep', 'resetRetries'],
                  },
                  {
                    guard: and(['answersCurrentStep', 'hasMoreToDo', 'hasBudgetLeft']),
                    target: '#session.active.error',
                    actions: ['endStep', 'resetRetries', 'recordIterationLimit'],
                  },
                  {
                    guard: and(['answersCurrentStep', 'hasMoreToDo']),
                    target: '#session.active.error',
                    actions: ['endStep', 'resetRetries', 'recordBudgetLimit'],
                  },
                  {
                    guard: 'answersCurrentStep',
                    target: '#session.active.awaiting_user_input',
                    actions: ['endStep', 'resetRetries'],
                  },
                ],
                'agent.run': [
                  {
                    guard: and(['answersCurrentStep', 'needsConfirmation']),
                    target: '#session.active.awaiting_user_confirmation',
                    actions: ['queueAgentCommand', 'resetRetries'],
                  },
                  { guard: 'answersCurrentStep', target: 'executing', actions: ['queueAgentCommand', 'resetRetries'] },
                ],
                'agent.finish': {
                  guard: 'answersCurrentStep',
                  target: '#session.active.finished',
                  actions: ['endStep', 'resetRetries'],
                },
                'agent.failed': {
                  guard: 'answersCurrentStep',
                  target: '#session.active.error',
                  actions: 'recordFailure',
                },
                'agent.usage': { actions: 'addCost' },
                'command.finished': recordsLateOutput,
                'agent.rate_limited': [
                  {
                    guard: and(['answersCurrentStep', 'hasRetriesLeft']),
                    target: '#session.active.rate_limited',
                    actions: 'waitForRetry',
                  },
                  { guard: 'answersCurrentStep', target: '#session.active.error', actions: 'recordRetriesOut' },
                ],
              },
            },
            executing: {
              description: 'A command runs in the runtime; its output comes back as an observation.',
              entry: 'runCommand',
              on: {
                'command.finished': [
                  ...stepping('pendingCommandWasAgents', ['clearCommand']),
                  { guard: 'hasUnreadMessage', target: 'thinking', actions: 'clearCommand' },
                  { target: '#session.active.awaiting_user_input', actions: 'clearCommand' },
                ],
              },
            },
          },
        },
        paused: {
          description: 'A user paused the agent; a command already running finishes. Resuming continues the task.',
          tags: ['paused'],
          entry: 'endStep',
          on: {
            'user.message': { actions: 'markUnread' },
            'user.change_state': [
              { guard: and([wants('running'), 'hasPendingCommand']), target: 'running.executing' },
              { guard: and([wants('running'), 'hasIterationsLeft', 'hasBudgetLeft']), target: 'running.thinking' },
              { guard: and([wants('running'), 'hasBudgetLeft']), target: 'error', actions: 'recordIterationLimit' },
              { guard: wants('running'), target: 'error', actions: 'recordBudgetLimit' },
              stops,
            ],
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('paused'),
          },
        },
        stopped: {
          description: 'A user stopped the agent. A new message or command starts it again.',
          tags: ['stopped'],
          entry: ['endStep', 'clearDeadline'],
          on: { ...startsWork, 'command.finished': recordsLateOutput, 'session.passivate': passivates('stopped') },
        },
        finished: {
          description: 'The agent says its task is done. A new message starts a new task.',
          tags: ['finished'],
          on: {
            ...startsWork,
            'user.change_state': stops,
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('finished'),
          },
        },
        rejected: {
          description: 'The user rejected the action the agent asked to confirm; it did not run.',
          tags: ['rejected'],
          on: { ...startsWork, 'user.change_state': stops, 'session.passivate': passivates('rejected') },
        },
        error: {
          description:
            'Something failed; `context.error` says what. A new message or command tries again; a runtime that connects again (after a reconnect) returns to awaiting_user_input.',
          tags: ['error'],
          on: {
            ...startsWork,
            'runtime.connected': { target: 'awaiting_user_input', actions: 'runtimeConnected' },
            'user.change_state': stops,
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('error'),
          },
        },
        awaiting_user_confirmation: {
          description: 'Confirmation mode: a risky command waits for the user to confirm or reject it.',
          tags: ['awaiting_user_confirmation'],
          on: {
            'user.message': { actions: 'markUnread' },
            'user.change_state': [
              { guard: wants('user_confirmed'), target: 'running.executing' },
              { guard: wants('user_rejected'), target: 'rejected', actions: 'clearCommand' },
              stops,
            ],
            // The command waiting for confirmation stays pending: it comes back with the session.
            'session.passivate': {
              target: '#session.passivated',
              actions: { type: 'rememberState', params: { state: 'awaiting_user_confirmation' } },
            },
          },
        },
        rate_limited: {
          description: 'The LLM asked us to slow down; the step is tried again at `context.deadline`.',
          tags: ['rate_limited'],
          on: {
            'user.message': { actions: 'markUnread' },
            'deadline.passed': [
              {
                guard: and(['deadlinePassed', 'hasIterationsLeft', 'hasBudgetLeft']),
                target: 'running.thinking',
                actions: 'clearDeadline',
              },
              {
                guard: and(['deadlinePassed', 'hasBudgetLeft']),
                target: 'error',
                actions: ['clearDeadline', 'recordIterationLimit'],
              },
              { guard: 'deadlinePassed', target: 'error', actions: ['clearDeadline', 'recordBudgetLimit'] },
            ],
            'user.change_state': [{ guard: wants('paused'), target: 'paused', actions: 'clearDeadline' }, stops],
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('rate_limited'),
          },
        },
      },
    },
    passivated: {
      description: 'Out of memory: a snapshot and the log hold everything. Any access brings it back.',
      on: {
        'session.rehydrate': [
          ...(['running', 'paused', 'stopped', 'finished', 'rejected', 'error'] as const).map((state) => ({
            guard: resumesIn(state),
            target: state === 'running' ? 'active.running' : `active.${state}`,
            actions: 'forgetState' as const,
          })),
          {
            guard: resumesIn('awaiting_user_confirmation'),
            target: 'active.awaiting_user_confirmation',
            actions: 'forgetState',
          },
          { guard: resumesIn('rate_limited'), target: 'active.rate_limited', actions: 'forgetState' },
          { target: 'active.awaiting_user_input', actions: 'forgetState' },
        ],
        'session.close': { target: 'closed' },
      },
    },
    closed: {
      description:
        'The conversation ended for good (`session_closed`, stored when it is deleted, before its log is purged).',
      tags: ['stopped'],
      type: 'final',
    },
  },
});

export type SessionMachine = typeof sessionMachine;
export type SessionSnapshot = SnapshotFrom<SessionMachine>;

/** The agent state a snapshot shows to users (while passivated: the state it comes back in). */
export function agentStateOf(snapshot: SessionSnapshot): AgentState {
  if (snapshot.context.resumeState !== null && snapshot.matches('passivated')) return snapshot.context.resumeState;
  // Every state node users can see carries exactly one agent-state tag.
  for (const tag of snapshot.tags) return tag as AgentState;
  return 'loading';
}
