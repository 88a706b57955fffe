import type { SnapshotFrom } from 'xstate';
import type { AgentState } from '../protocol/index.ts';
import { initialContext } from './sessionContext.ts';
import { and, not, resumesIn, sessionSetup, wants } from './sessionSetup.ts';

export {
  SESSION_MACHINE_VERSION,
  UNRECORDED_MACHINE_VERSION,
  DEFAULT_RATE_LIMIT_RETRIES,
  LEGACY_MAX_ATTEMPTS,
  type SessionInput,
  type SessionContext,
  type PendingCommand,
  type Deadline,
  type RepositoryProgress,
} from './sessionContext.ts';

const THINKING = '#session.active.running.thinking';
const ERROR = '#session.active.error';
const PAUSED = '#session.active.paused';
const AWAITING = '#session.active.awaiting_user_input';

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
type StepAction = 'endStep' | 'resetRetries' | 'clearCommand' | 'clearDeadline';
/**
 * The one limit check: when `guard` holds, another agent step if iterations
 * and budget are left, else error with the reason. (A user message needs no
 * check: it extends a reached limit.) Going straight to `thinking` instead of
 * through a transient state saves a microstep, so folds are that much cheaper.
 */
/** The conditions under which another agent step is due (each a guard of `sessionSetup`). */
type StepDue = 'answersWithMoreToDo' | 'answersAgentsCommand' | 'deadlinePassed' | 'wantsToRun';

const withinLimits = (guard: StepDue, actions: readonly StepAction[]) =>
  [
    { guard: and([guard, 'hasLimitsLeft']), target: THINKING, reenter: true, actions: [...actions] },
    { guard, target: ERROR, actions: [...actions, 'recordLimitReached'] },
  ] as const;

/** The workspace's repository, cloned and its instruction files read, while a runtime comes up (`setting_up`). */
const repositorySteps = {
  'repository.cloned': { guard: 'clones', actions: 'recordCloned' },
  'repository.instructions_loaded': { guard: 'loadsInstructions', actions: 'recordInstructions' },
} as const;

/** A failed clone: the agent in error, the runtime stopped (not lost), a command sent meanwhile failed. */
const clonesFailed = ['runtimeStopped', 'recordCloneFailure', 'recordFailure', 'failPendingCommand'] as const;

/** Leaving memory keeps the agent state to come back to; never with a command still out. */
const passivates = (state: AgentState) =>
  ({
    guard: 'hasNoCommandOut',
    target: '#session.passivated',
    actions: { type: 'rememberState', params: { state } },
  }) as const;

/**
 * The lifecycle of one conversation. Pure: every action assigns context;
 * the effects a state asks for (a runtime, an agent step, a command, a
 * deadline) are read from it by `effectsOf`, and their results come back as
 * events, after they are stored. See docs/statecharts.md.
 */
export const sessionMachine = sessionSetup.createMachine({
  id: 'session',
  description: 'One conversation: its runtime and its agent loop, driven by stored events only.',
  context: ({ input }) => initialContext(input),
  initial: 'starting',
  on: {
    'session.upgrade': { guard: 'upgrades', actions: 'upgrade' },
    // The fork's own record comes last: a fork of a fork names its parent, not the copied grandparent.
    'session.fork': { actions: 'recordFork' },
  },
  states: {
    starting: {
      description: 'The runtime is created, answers, and its workspace is set up; user messages wait.',
      tags: ['loading', 'busy'],
      initial: 'creating',
      states: {
        creating: { description: 'The runtime is being created.' },
        connecting: { description: 'Waiting for the new runtime to answer.' },
        setting_up: { description: 'The workspace is being set up.' },
      },
      on: {
        'runtime.starting': { target: '.creating', actions: 'runtimeStarting' },
        'runtime.connecting': { target: '.connecting', actions: 'runtimeConnecting' },
        'runtime.setting_up': { target: '.setting_up', actions: 'runtimeSettingUp' },
        'runtime.connected': [
          { guard: 'hasUnreadMessage', target: 'active.running', actions: ['runtimeConnected', 'clearDeadline'] },
          { target: 'active.awaiting_user_input', actions: ['runtimeConnected', 'clearDeadline'] },
        ],
        'runtime.disconnected': { target: 'active.error', actions: ['runtimeLost', 'recordFailure'] },
        ...repositorySteps,
        // Not a lost runtime: nothing brings it back by itself (a page refresh does not); `reconnect_runtime` does.
        'repository.clone_failed': { guard: 'clones', target: 'active.error', actions: clonesFailed },
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
        ...repositorySteps,
        'repository.clone_failed': { guard: 'clones', target: '.error', actions: clonesFailed },
        'user.reconnect_runtime': { guard: 'hasLostRuntime', actions: 'requestRuntime' },
        // The later calls of a reply, stored with its first: each waits its turn.
        'agent.run': { guard: 'continuesReply', actions: 'queueCall' },
        // A queued call answered without running (the decision that cut the reply stored it).
        'command.finished': { guard: 'answersQueuedCall', actions: 'dropQueuedCall' },
        // What an LLM call used counts in any state: a step that was cut or whose answer came too late used it too.
        'agent.usage': { actions: 'addCost' },
        // The partial message of a step an interrupt or a stop just cut (same decision).
        'agent.message': { guard: 'answersCutStep', actions: 'forgetCutStep' },
        // Back after a crash (no passivation): a command that was out is reported interrupted.
        'session.rehydrate': { actions: ['forgetState', 'interruptCommand', 'forgetRuntimeProcess'] },
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
          description:
            'The agent is working: thinking about its next action or running a command. A pause asked here (`context.pausing`) takes effect once the step answers or the command finishes; an interrupt or a stop cuts both at once.',
          tags: ['running', 'busy'],
          entry: 'markRunning',
          exit: ['clearRunning', 'clearPausing'],
          initial: 'thinking',
          on: {
            'user.message': { actions: 'markUnread' },
            // An interrupt cuts the step and the command (the decision stores what they leave) and hands over to the user.
            'user.interrupt': { target: AWAITING, actions: 'cutStep' },
            'user.change_state': [
              { guard: wants('stopped'), target: 'stopped', actions: 'cutStep' },
              // Version 7 and before: a pause took effect at once, the step or command left running.
              { guard: and([wants('paused'), 'writtenBeforeVersion8']), target: 'paused' },
              // The step answers, or the command finishes, then the agent pauses.
              { guard: and([wants('paused'), not('pausing')]), actions: 'requestPause' },
              { guard: and([wants('running'), 'pausing']), actions: 'cancelPause' },
            ],
            'session.passivate': passivates('running'),
          },
          states: {
            thinking: {
              description: 'Waiting for the agent to choose its next action.',
              entry: 'beginStep',
              on: {
                'agent.message': [
                  {
                    guard: and(['answersCurrentStep', 'pausing']),
                    target: PAUSED,
                    actions: ['endStep', 'resetRetries'],
                  },
                  // A message came while the agent worked, or the agent has more to say:
                  // another step, within the limits.
                  ...withinLimits('answersWithMoreToDo', ['endStep', 'resetRetries']),
                  { guard: 'answersCurrentStep', target: AWAITING, actions: ['endStep', 'resetRetries'] },
                ],
                'agent.run': [
                  {
                    guard: and(['answersCurrentStep', 'needsConfirmation']),
                    target: '#session.active.awaiting_user_confirmation',
                    actions: ['queueAgentCommand', 'resetRetries'],
                  },
                  // Pausing: the command waits, unrun, for the agent to resume.
                  {
                    guard: and(['answersCurrentStep', 'pausing']),
                    target: PAUSED,
                    actions: ['queueAgentCommand', 'holdCommand', 'resetRetries'],
                  },
                  { guard: 'answersCurrentStep', target: 'executing', actions: ['queueAgentCommand', 'resetRetries'] },
                ],
                'agent.finish': {
                  guard: 'answersCurrentStep',
                  target: '#session.active.finished',
                  actions: ['endStep', 'resetRetries'],
                },
                'agent.failed': { guard: 'answersCurrentStep', target: ERROR, actions: 'recordFailure' },
                'agent.attempt': { guard: 'takesNextAttempt', actions: 'nextAttempt' },
                'command.finished': recordsLateOutput,
                'agent.rate_limited': [
                  // Pausing: no wait for a retry; resuming starts a new step.
                  { guard: and(['answersCurrentStep', 'pausing']), target: PAUSED, actions: 'resetRetries' },
                  {
                    guard: and(['answersCurrentStep', 'hasRetriesLeft']),
                    target: '#session.active.rate_limited',
                    actions: 'waitForRetry',
                  },
                  { guard: 'answersCurrentStep', target: ERROR, actions: 'recordRetriesOut' },
                ],
              },
            },
            executing: {
              description:
                'A command runs in the runtime (or, after a crash, is reported interrupted); its output comes back as an observation.',
              on: {
                'command.finished': [
                  // The reply's next call: it waits for confirmation, is held by a pause, or runs.
                  {
                    guard: and(['answersPendingCommand', 'hasQueuedCall', 'nextNeedsConfirmation']),
                    target: '#session.active.awaiting_user_confirmation',
                    actions: 'takeQueuedCall',
                  },
                  {
                    guard: and(['answersPendingCommand', 'hasQueuedCall', 'pausing']),
                    target: PAUSED,
                    actions: ['takeQueuedCall', 'holdCommand'],
                  },
                  { guard: and(['answersPendingCommand', 'hasQueuedCall']), actions: 'takeQueuedCall' },
                  { guard: and(['answersPendingCommand', 'pausing']), target: PAUSED, actions: 'clearCommand' },
                  ...withinLimits('answersAgentsCommand', ['clearCommand']),
                  {
                    guard: and(['answersPendingCommand', 'hasUnreadMessage']),
                    target: 'thinking',
                    actions: 'clearCommand',
                  },
                  { guard: 'answersPendingCommand', target: AWAITING, actions: 'clearCommand' },
                  // Version 3 logs: their `executing` took any output as its command's (kept so they fold as written).
                  {
                    guard: 'writtenUnderVersion3',
                    target: '#session.active.awaiting_user_input',
                    actions: 'clearCommand',
                  },
                  // The late output of an older command (stopped, then a new one sent): recorded, nothing changes.
                  { guard: 'answersOlderCommand', actions: 'recordOlderOutput' },
                ],
                'user.reconnect_runtime': {
                  guard: 'hasLostRuntime',
                  actions: ['failPendingCommand', 'requestRuntime'],
                },
              },
            },
          },
        },
        paused: {
          description:
            'A user paused the agent (after the step answered or the command finished). Resuming runs a command the agent chose meanwhile, or takes a new step.',
          tags: ['paused'],
          entry: 'endStep',
          on: {
            'user.message': { actions: 'markUnread' },
            'user.change_state': [
              {
                guard: and([wants('running'), 'hasPendingCommand']),
                target: 'running.executing',
                actions: 'startHeldCommand',
              },
              ...withinLimits('wantsToRun', []),
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
            'Something failed; `context.error` says what. A new message or command tries again; `reconnect_runtime` asks for a new runtime, and once it connects the agent awaits the user.',
          tags: ['error'],
          on: {
            ...startsWork,
            'user.reconnect_runtime': { guard: 'runtimeNotComingUp', actions: 'requestRuntime' },
            'runtime.connected': { target: 'awaiting_user_input', actions: 'runtimeConnected' },
            'user.change_state': stops,
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('error'),
          },
        },
        awaiting_user_confirmation: {
          description:
            'Confirmation mode: a call that needs confirmation (stored `needs_confirmation`) waits for the user to confirm or reject it.',
          tags: ['awaiting_user_confirmation'],
          on: {
            'user.message': { actions: 'markUnread' },
            'user.change_state': [
              { guard: wants('user_confirmed'), target: 'running.executing' },
              { guard: wants('user_rejected'), target: 'rejected', actions: 'clearCommand' },
              stops,
            ],
            // A call rejected or stopped while it waits is answered first, in the same decision.
            'command.finished': recordsLateOutput,
            // The command waiting for confirmation never started: it stays pending, not interrupted.
            'session.rehydrate': { actions: 'forgetState' },
            'session.passivate': {
              target: '#session.passivated',
              actions: { type: 'rememberState', params: { state: 'awaiting_user_confirmation' } },
            },
          },
        },
        rate_limited: {
          description: 'The LLM asked us to slow down; the step is tried again at `context.deadline`.',
          tags: ['rate_limited', 'busy'],
          on: {
            'user.message': { actions: 'markUnread' },
            'deadline.passed': [
              // Recorded attempts: the same step again (its next attempt is stored with this timeout).
              { guard: and(['deadlinePassed', 'keepsStep']), target: THINKING, actions: 'clearDeadline' },
              ...withinLimits('deadlinePassed', ['clearDeadline']),
            ],
            'user.change_state': [{ guard: wants('paused'), target: 'paused', actions: 'clearDeadline' }, stops],
            'user.interrupt': { target: 'awaiting_user_input', actions: ['cutStep', 'clearDeadline'] },
            'command.finished': recordsLateOutput,
            'session.passivate': passivates('rate_limited'),
          },
        },
      },
    },
    passivated: {
      description: 'Out of memory: a snapshot and the log hold everything. An action brings it back.',
      on: {
        'session.rehydrate': [
          ...(
            [
              'running',
              'paused',
              'stopped',
              'finished',
              'rejected',
              'error',
              'awaiting_user_confirmation',
              'rate_limited',
            ] as const
          ).map((state) => ({
            guard: resumesIn(state),
            target: `active.${state}` as const,
            actions: 'forgetState' as const,
          })),
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
