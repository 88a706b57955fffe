import { and, assign, setup, type SnapshotFrom } from 'xstate';
import type { AgentState, RuntimeStatus } from '../src/protocol/index.ts';
import type { SessionEvent } from './sessionEvents.ts';

/** Bump when a change makes old persisted snapshots unsafe to restore. */
export const SESSION_MACHINE_VERSION = 1;

export interface SessionInput {
  conversationId: string;
  maxIterations: number;
}

export interface PendingCommand {
  eventId: number;
  source: 'user' | 'agent';
  command: string;
}

export interface SessionContext {
  conversationId: string;
  maxIterations: number;
  /** Agent steps taken so far. */
  iterations: number;
  /** A user message the agent has not been asked about yet. */
  unreadMessage: boolean;
  /** id of the event that started the current agent step: its answer must carry it as `cause`. */
  stepCause: number | null;
  pendingCommand: PendingCommand | null;
  /** Why the agent is in error, when it is. */
  error: string | null;
  /** The runtime's last reported status. */
  runtime: RuntimeStatus;
}

const AGENT_STATE_TAGS = {
  loading: ['loading'],
  running: ['running'],
  awaiting: ['awaiting_user_input'],
  stopped: ['stopped'],
  finished: ['finished'],
  error: ['error'],
} as const satisfies Record<string, readonly AgentState[]>;

/**
 * The lifecycle of one conversation. Pure: effects are named actions that the
 * host provides (`startRuntime`, `askAgent`, `runCommand`); their results come
 * back as events, after they are stored.
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
    markUnread: assign({ unreadMessage: true }),
    runtimeStarting: assign({ runtime: 'starting' as const }),
    runtimeConnected: assign({ runtime: 'connected' as const }),
    runtimeLost: assign({ runtime: 'disconnected' as const }),
    beginStep: assign({
      iterations: ({ context }) => context.iterations + 1,
      unreadMessage: false,
      stepCause: ({ event }) => event.eventId,
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
        event.type === 'agent.run' ? { eventId: event.eventId, source: 'agent' as const, command: event.command } : null,
      stepCause: null,
    }),
    clearCommand: assign({ pendingCommand: null }),
    recordFailure: assign({
      error: ({ event }) => ('reason' in event ? event.reason : 'unknown error'),
      stepCause: null,
    }),
    recordIterationLimit: assign({
      error: ({ context }) => `the agent reached its limit of ${context.maxIterations} iterations`,
    }),
  },
  guards: {
    hasUnreadMessage: ({ context }) => context.unreadMessage,
    hasIterationsLeft: ({ context }) => context.iterations < context.maxIterations,
    answersCurrentStep: ({ context, event }) =>
      'cause' in event && context.stepCause !== null && event.cause === context.stepCause,
    answersPendingCommand: ({ context, event }) =>
      'cause' in event && context.pendingCommand !== null && event.cause === context.pendingCommand.eventId,
    pendingCommandWasAgents: ({ context }) => context.pendingCommand?.source === 'agent',
    asksToStop: ({ event }) => event.type === 'user.change_state' && event.state === 'stopped',
  },
}).createMachine({
  id: 'session',
  description: 'One conversation: its runtime and its agent loop, driven by stored events only.',
  context: ({ input }) => ({
    conversationId: input.conversationId,
    maxIterations: input.maxIterations,
    iterations: 0,
    unreadMessage: false,
    stepCause: null,
    pendingCommand: null,
    error: null,
    runtime: 'stopped',
  }),
  initial: 'starting',
  states: {
    starting: {
      description: 'The runtime is being created; user messages wait for it.',
      tags: AGENT_STATE_TAGS.loading,
      entry: 'startRuntime',
      on: {
        'runtime.starting': { actions: 'runtimeStarting' },
        'runtime.connected': [
          { guard: 'hasUnreadMessage', target: 'active.running', actions: 'runtimeConnected' },
          { target: 'active.awaiting_user_input', actions: 'runtimeConnected' },
        ],
        'runtime.disconnected': { target: 'active.error', actions: ['runtimeLost', 'recordFailure'] },
        'user.message': { actions: 'markUnread' },
      },
    },
    active: {
      description: 'The runtime is up; the agent loop runs or waits.',
      initial: 'awaiting_user_input',
      on: {
        'runtime.starting': { actions: 'runtimeStarting' },
        'runtime.connected': { actions: 'runtimeConnected' },
        'runtime.disconnected': { target: '.error', actions: ['runtimeLost', 'recordFailure'] },
      },
      states: {
        awaiting_user_input: {
          description: 'The agent waits for the user.',
          tags: AGENT_STATE_TAGS.awaiting,
          on: {
            'user.message': { target: 'running', actions: 'markUnread' },
            'user.run': { target: 'running.executing', actions: 'queueUserCommand' },
            'user.change_state': { guard: 'asksToStop', target: 'stopped' },
            'command.finished': { guard: 'answersPendingCommand', actions: 'clearCommand' },
          },
        },
        running: {
          description: 'The agent is working: thinking about its next action or running a command.',
          tags: AGENT_STATE_TAGS.running,
          initial: 'next',
          on: {
            'user.message': { actions: 'markUnread' },
            'user.change_state': { guard: 'asksToStop', target: 'stopped' },
          },
          states: {
            next: {
              description: 'Decides whether the agent may take another step.',
              always: [
                { guard: 'hasIterationsLeft', target: 'thinking' },
                { target: '#session.active.error', actions: 'recordIterationLimit' },
              ],
            },
            thinking: {
              description: 'Waiting for the agent to choose its next action.',
              entry: ['beginStep', 'askAgent'],
              on: {
                'agent.message': [
                  { guard: and(['answersCurrentStep', 'hasUnreadMessage']), target: 'next', actions: 'endStep' },
                  { guard: 'answersCurrentStep', target: '#session.active.awaiting_user_input', actions: 'endStep' },
                ],
                'agent.run': { guard: 'answersCurrentStep', target: 'executing', actions: 'queueAgentCommand' },
                'agent.finish': { guard: 'answersCurrentStep', target: '#session.active.finished', actions: 'endStep' },
                'agent.failed': { guard: 'answersCurrentStep', target: '#session.active.error', actions: 'recordFailure' },
              },
            },
            executing: {
              description: 'A command runs in the runtime; its output comes back as an observation.',
              entry: 'runCommand',
              on: {
                'command.finished': [
                  { guard: 'pendingCommandWasAgents', target: 'next', actions: 'clearCommand' },
                  { target: '#session.active.awaiting_user_input', actions: 'clearCommand' },
                ],
              },
            },
          },
        },
        stopped: {
          description: 'A user stopped the agent. A new message or command starts it again.',
          tags: AGENT_STATE_TAGS.stopped,
          entry: 'endStep',
          on: {
            'user.message': { target: 'running', actions: 'markUnread' },
            'user.run': { target: 'running.executing', actions: 'queueUserCommand' },
            'command.finished': { guard: 'answersPendingCommand', actions: 'clearCommand' },
          },
        },
        finished: {
          description: 'The agent says its task is done. A new message starts a new task.',
          tags: AGENT_STATE_TAGS.finished,
          on: {
            'user.message': { target: 'running', actions: 'markUnread' },
            'user.run': { target: 'running.executing', actions: 'queueUserCommand' },
            'user.change_state': { guard: 'asksToStop', target: 'stopped' },
          },
        },
        error: {
          description: 'Something failed; `context.error` says what. A new message or command tries again.',
          tags: AGENT_STATE_TAGS.error,
          on: {
            'user.message': { target: 'running', actions: 'markUnread' },
            'user.run': { target: 'running.executing', actions: 'queueUserCommand' },
            'user.change_state': { guard: 'asksToStop', target: 'stopped' },
            'command.finished': { guard: 'answersPendingCommand', actions: 'clearCommand' },
          },
        },
      },
    },
  },
});

export type SessionMachine = typeof sessionMachine;
export type SessionSnapshot = SnapshotFrom<SessionMachine>;

/** The agent state a snapshot shows to users. */
export function agentStateOf(snapshot: SessionSnapshot): AgentState {
  // Every state node that users can see carries exactly one agent-state tag.
  for (const tag of snapshot.tags) return tag as AgentState;
  return 'loading';
}
