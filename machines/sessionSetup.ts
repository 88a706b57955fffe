import { and, assign, not, or, setup } from 'xstate';
import type { AgentState } from '../protocol/index.ts';
import {
  isComingUp,
  LEGACY_MAX_ATTEMPTS,
  type PendingCommand,
  type SessionContext,
  type SessionInput,
} from './sessionContext.ts';
import type { SessionEvent } from './sessionEvents.ts';

/** A state's tags: its agent state (exactly one per state users can see), and `busy` where it works by itself. */
export type SessionTag = AgentState | 'busy';

const reasonOf = (event: SessionEvent, otherwise: string): string => ('reason' in event ? event.reason : otherwise);

/**
 * The session machine's types, actions and guards. Pure: every action only
 * assigns context. Effects are not actions: the host reads them from the
 * state (`effects.ts`), the same way live and after a fold.
 */
export const sessionSetup = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
    tags: {} as SessionTag,
  },
  actions: {
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
    runtimeConnected: assign({ runtime: 'connected' as const, runtimeLost: null }),
    runtimeStopped: assign({ runtime: 'stopped' as const }),
    recordCloneFailure: assign({
      repository: ({ context, event }) =>
        context.repository && {
          ...context.repository,
          status: 'failed' as const,
          failure: reasonOf(event, 'the repository could not be cloned'),
        },
    }),
    recordCloned: assign({
      repository: ({ context }) => context.repository && { ...context.repository, status: 'cloned' as const },
    }),
    recordInstructions: assign({
      repository: ({ context }) => context.repository && { ...context.repository, status: 'ready' as const },
    }),
    runtimeLost: assign({
      runtime: 'disconnected' as const,
      runtimeLost: ({ event }) => reasonOf(event, 'the runtime is not available'),
    }),
    // A reconnect asks for a new runtime; the event's id names it, so the host can tell it from the old one.
    requestRuntime: assign({
      runtime: 'reconnecting' as const,
      runtimeCause: ({ event }) => event.eventId,
      runtimeLost: null,
      // A repository whose clone failed is cloned again by the new runtime.
      repository: ({ context }) => {
        if (context.repository?.status !== 'failed') return context.repository;
        const { failure: _failure, ...repository } = context.repository;
        return { ...repository, status: 'to_clone' as const };
      },
    }),
    // A running spell outlives a passivation: a session that comes back running is not one more running.
    markRunning: assign({
      runningSince: ({ context, event }) =>
        event.type === 'session.rehydrate' && context.runningSince !== null ? context.runningSince : (event.at ?? null),
    }),
    clearRunning: assign({
      runningSince: ({ context, event }) => (event.type === 'session.passivate' ? context.runningSince : null),
    }),
    // Back after a crash: the old process's runtime is gone (one coming up is brought up again).
    forgetRuntimeProcess: assign({
      runtime: ({ context }) => (context.runtime === 'connected' ? ('stopped' as const) : context.runtime),
    }),
    // A command sent to a lost runtime is failed, also when a reconnect comes before its report.
    failPendingCommand: assign({
      pendingCommand: ({ context }) =>
        context.pendingCommand && {
          ...context.pendingCommand,
          lost: context.runtimeLost ?? context.repository?.failure ?? 'the runtime was lost',
        },
    }),
    // A step's cause is what the agent answers: the user message it has not
    // read yet, else the event that started the step (an observation, a resume,
    // a retry). Two live steps never share one, so a late answer to an old step
    // is refused. A step entered again with its cause kept (back after a
    // passivation; under recorded attempts, also after a rate-limit wait) is
    // the same step: asked again as its next attempt, not counted again.
    beginStep: assign(({ context, event }) => {
      const kept = context.stepCause !== null;
      if (kept && context.maxAttempts !== null) return { error: null };
      const continuing = kept && event.type === 'session.rehydrate';
      let stepCause = event.eventId;
      if (context.unreadMessage && context.lastMessageId !== null) stepCause = context.lastMessageId;
      else if (continuing) stepCause = context.stepCause!;
      return {
        iterations: continuing ? context.iterations : context.iterations + 1,
        unreadMessage: false,
        stepCause,
        cutStep: null,
        attempt: continuing ? context.attempt : 1,
        attemptsCounted: continuing ? context.attemptsCounted : 1,
        error: null,
      };
    }),
    nextAttempt: assign(({ context, event }) =>
      event.type === 'agent.attempt'
        ? { attempt: event.attempt, attemptsCounted: context.attemptsCounted + (event.counted ? 1 : 0) }
        : {},
    ),
    endStep: assign({ stepCause: null }),
    // An interrupt or a stop cuts the step: its partial message, if the decision stores one, answers it.
    cutStep: assign(({ context }) => ({ cutStep: context.stepCause, stepCause: null, pausing: false })),
    forgetCutStep: assign({ cutStep: null }),
    requestPause: assign({ pausing: true }),
    cancelPause: assign({ pausing: false }),
    // A pause asked while the agent worked outlives a passivation (it comes back running, still pausing).
    clearPausing: assign({
      pausing: ({ context, event }) => (event.type === 'session.passivate' ? context.pausing : false),
    }),
    queueUserCommand: assign({
      pendingCommand: ({ event }) =>
        event.type === 'user.run' ? { eventId: event.eventId, source: 'user' as const, command: event.command } : null,
      error: null,
    }),
    queueAgentCommand: assign({
      pendingCommand: ({ event }) => (event.type === 'agent.run' ? agentCall(event) : null),
      stepCause: null,
    }),
    // A later call of the same reply waits its turn.
    queueCall: assign({
      queuedCalls: ({ context, event }) =>
        event.type === 'agent.run' ? [...context.queuedCalls, agentCall(event)] : context.queuedCalls,
    }),
    // The call before it has its result: the next call of the reply is the one out (or waiting).
    takeQueuedCall: assign(({ context }) => ({
      pendingCommand: context.queuedCalls[0] ?? null,
      queuedCalls: context.queuedCalls.slice(1),
    })),
    // A queued call answered without running (an interrupt, a stop, a rejection, a passivation, a lost runtime).
    dropQueuedCall: assign({
      queuedCalls: ({ context, event }) =>
        context.queuedCalls.filter((call) => !('cause' in event) || call.eventId !== event.cause),
    }),
    clearCommand: assign({ pendingCommand: null }),
    holdCommand: assign({
      pendingCommand: ({ context }) => context.pendingCommand && { ...context.pendingCommand, held: true as const },
    }),
    startHeldCommand: assign({
      pendingCommand: ({ context }) => {
        if (!context.pendingCommand?.held) return context.pendingCommand;
        const { held: _held, ...started } = context.pendingCommand;
        return started;
      },
    }),
    // Takes an event that changes nothing but is stored (xstate's `can()` counts a transition with an action).
    recordOlderOutput: assign({}),
    // Back after a crash: a command that was out died with the old process.
    interruptCommand: assign({
      pendingCommand: ({ context }) =>
        context.pendingCommand && !context.pendingCommand.held
          ? { ...context.pendingCommand, interrupted: true as const }
          : context.pendingCommand,
    }),
    recordFailure: assign({
      error: ({ event }) => reasonOf(event, 'unknown error'),
      stepCause: null,
      deadline: null,
    }),
    // The one place a reached limit is put into words (budget first when both are spent).
    recordLimitReached: assign({
      error: ({ context }) =>
        context.maxBudget === null || context.spent < context.maxBudget
          ? `the agent reached its limit of ${context.maxIterations} iterations; send a message to let it go on`
          : `the agent spent $${context.spent.toFixed(4)}, its budget is $${context.maxBudget.toFixed(4)}; send a message to let it go on`,
    }),
    recordRetriesOut: assign({
      error: ({ context, event }) =>
        context.rateLimits < context.maxRateLimitRetries
          ? `the agent step gave up after ${context.attemptsCounted} attempts (at most ${context.maxAttempts ?? LEGACY_MAX_ATTEMPTS}): rate limited (${reasonOf(event, 'rate limited')})`
          : `rate limited ${context.rateLimits + 1} times in a row (${reasonOf(event, 'rate limited')}); giving up`,
      rateLimits: 0,
      stepCause: null,
      deadline: null,
    }),
    waitForRetry: assign({
      rateLimits: ({ context }) => context.rateLimits + 1,
      deadline: ({ event }) =>
        event.type === 'agent.rate_limited' ? { name: 'retry' as const, at: event.retryAt } : null,
      error: ({ event }) => ('reason' in event ? event.reason : null),
      // Under recorded attempts the step waits and comes back as its next attempt.
      stepCause: ({ context }) => (context.maxAttempts === null ? null : context.stepCause),
    }),
    clearDeadline: assign({ deadline: null }),
    rememberState: assign((_, params: { state: AgentState }) => ({ resumeState: params.state })),
    forgetState: assign({ resumeState: null }),
    recordFork: assign({
      forkedFrom: ({ context, event }) =>
        event.type === 'session.fork' ? { conversationId: event.parent, seq: event.seq } : context.forkedFrom,
    }),
    upgrade: assign({
      machineVersion: ({ context, event }) => (event.type === 'session.upgrade' ? event.to : context.machineVersion),
    }),
  },
  guards: {
    hasUnreadMessage: ({ context }) => context.unreadMessage,
    /** A pause was asked while the agent worked: the step's answer, or the command's output, pauses it. */
    pausing: ({ context }) => context.pausing === true,
    /** The log was written before version 8, whose pause took effect at once (the step or command left running). */
    writtenBeforeVersion8: ({ context }) => context.machineVersion < 8,
    /** The partial message of the step an interrupt or a stop just cut. */
    answersCutStep: ({ context, event }) =>
      event.type === 'agent.message' &&
      event.interrupted === true &&
      context.cutStep !== null &&
      event.cause === context.cutStep,
    hasMoreToDo: or(['hasUnreadMessage', ({ event }) => event.type === 'agent.message' && event.goesOn === true]),
    /** Iterations and budget left: the one limit check every new agent step passes. */
    hasLimitsLeft: ({ context }) =>
      context.iterations < context.maxIterations && (context.maxBudget === null || context.spent < context.maxBudget),
    hasRetriesLeft: ({ context }) =>
      context.rateLimits < context.maxRateLimitRetries &&
      context.attemptsCounted < (context.maxAttempts ?? LEGACY_MAX_ATTEMPTS),
    /** The next attempt of the current step, within the bound (an uncounted one always). */
    takesNextAttempt: ({ context, event }) =>
      event.type === 'agent.attempt' &&
      context.stepCause !== null &&
      event.item === String(context.stepCause) &&
      event.attempt === context.attempt + 1 &&
      (!event.counted || context.attemptsCounted < (context.maxAttempts ?? LEGACY_MAX_ATTEMPTS)),
    /** The step outlived a rate-limit wait (recorded attempts): it goes on as its next attempt. */
    keepsStep: ({ context }) => context.stepCause !== null,
    hasPendingCommand: ({ context }) => context.pendingCommand !== null,
    /** The repository is still to be cloned (once per conversation). */
    clones: ({ context }) => context.repository?.status === 'to_clone',
    /** Its instruction files are read once, after the clone. */
    loadsInstructions: ({ context }) => context.repository?.status === 'cloned',
    /** No command is out (one held for a resume never started). */
    hasNoCommandOut: ({ context }) => context.pendingCommand === null || context.pendingCommand.held === true,
    /** The runtime was lost, or its repository could not be cloned: a reconnect brings a new one. */
    hasLostRuntime: ({ context }) => context.runtimeLost !== null || context.repository?.status === 'failed',
    /** No runtime is being brought up already (a second reconnect would replace it at once). */
    runtimeNotComingUp: ({ context }) => !isComingUp(context.runtime),
    /** The log was written under version 3, whose `executing` took any command's output as its own. */
    writtenUnderVersion3: ({ context }) => context.machineVersion <= 3,
    /** The answer of the current step, by its current attempt (an answer that names none is of any). */
    answersCurrentStep: ({ context, event }) =>
      'cause' in event &&
      context.stepCause !== null &&
      event.cause === context.stepCause &&
      (!('attempt' in event) || event.attempt === undefined || event.attempt === context.attempt),
    answersPendingCommand: ({ context, event }) =>
      'cause' in event && context.pendingCommand !== null && event.cause === context.pendingCommand.eventId,
    answersOlderCommand: ({ context, event }) =>
      'cause' in event &&
      event.cause !== undefined &&
      context.pendingCommand !== null &&
      event.cause < context.pendingCommand.eventId,
    pendingCommandWasAgents: ({ context }) => context.pendingCommand?.source === 'agent',
    needsConfirmation: ({ context, event }) =>
      context.confirmationMode && event.type === 'agent.run' && event.needsConfirmation,
    /** A later call of the reply whose first call is out (or waits): same step, same attempt. */
    continuesReply: ({ context, event }) => {
      const first = context.pendingCommand;
      return (
        event.type === 'agent.run' &&
        first?.source === 'agent' &&
        first.step !== undefined &&
        event.cause === first.step &&
        event.attempt === first.attempt
      );
    },
    hasQueuedCall: ({ context }) => context.queuedCalls.length > 0,
    /** Confirmation mode, and the reply's next call waits for the user. */
    nextNeedsConfirmation: ({ context }) =>
      context.confirmationMode && context.queuedCalls[0]?.needsConfirmation === true,
    answersQueuedCall: ({ context, event }) =>
      'cause' in event && context.queuedCalls.some((call) => call.eventId === event.cause),
    deadlinePassed: ({ context, event }) =>
      event.type === 'deadline.passed' && context.deadline?.name === event.name && event.at >= context.deadline.at,
    answersWithMoreToDo: and(['answersCurrentStep', 'hasMoreToDo']),
    answersAgentsCommand: and(['answersPendingCommand', 'pendingCommandWasAgents']),
    wantsToRun: ({ event }) => event.type === 'user.change_state' && event.state === 'running',
    upgrades: ({ context, event }) => event.type === 'session.upgrade' && event.to > context.machineVersion,
    wants: ({ event }, params: { state: AgentState }) =>
      event.type === 'user.change_state' && event.state === params.state,
    resumesIn: ({ context }, params: { state: AgentState }) => context.resumeState === params.state,
  },
});

/** An agent's call as the session keeps it while it is out or waits its turn. */
function agentCall(event: Extract<SessionEvent, { type: 'agent.run' }>): PendingCommand {
  return {
    eventId: event.eventId,
    source: 'agent',
    command: event.command,
    ...(event.tool && { tool: event.tool }),
    ...(event.callId !== undefined && { callId: event.callId }),
    ...(event.needsConfirmation && { needsConfirmation: true }),
    ...(event.cause !== undefined && { step: event.cause }),
    ...(event.attempt !== undefined && { attempt: event.attempt }),
  };
}

export const wants = (state: AgentState) => ({ type: 'wants', params: { state } }) as const;
export const resumesIn = (state: AgentState) => ({ type: 'resumesIn', params: { state } }) as const;
export { and, not };
