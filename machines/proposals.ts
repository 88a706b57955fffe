import type { AttemptReason, EventOf, NewEvent, UserAction } from '../protocol/index.ts';
import { callFailure, callInput, queuedResults, type CallInput } from './calls.ts';
import type { DecisionInput, Streamed } from './decide.ts';
import { LEGACY_MAX_ATTEMPTS } from './sessionContext.ts';
import { countsAgainstBound } from './sessionEvents.ts';
import type { SessionSnapshot } from './sessionMachine.ts';

// The events the decider proposes for each input (decide.ts checks each with the statechart and stores it).

export type CommandResult = Omit<EventOf<'command_output'>['data'], 'command'>;

/**
 * A proposal may read the state its earlier siblings led to (`session_passivated`
 * names the state it leaves in); one that reads it may also propose nothing.
 * A `together` group is one change: the state fact it leads to follows its
 * last event (an interrupt, then what it cut, then `awaiting_user_input`).
 */
export type Proposal = NewEvent | ((snapshot: SessionSnapshot) => NewEvent | null) | { together: Proposal[] };

/** Whether the agent works by itself now: where a user message meets the conversation's `double_texting`. */
export function agentWorks(snapshot: SessionSnapshot): boolean {
  return snapshot.matches({ active: 'running' }) || snapshot.matches({ active: 'rate_limited' });
}

export const ATTEMPT_MESSAGES: Partial<Record<AttemptReason, string>> = {
  resumed: 'the session left memory during the step and came back',
  forked: 'the fork asks the step again',
  owner_lost: 'the node running the step stopped before it answered',
};

/**
 * The current step's next attempt, stored before its first delta; past the
 * bound (`max_attempts`, counted attempts only) the step fails instead, with
 * why in words.
 */
export function nextAttempt(reason: AttemptReason, message: string | undefined, code: string) {
  return (current: SessionSnapshot): NewEvent => {
    const { stepCause, attempt, attemptsCounted, maxAttempts } = current.context;
    const cause = stepCause ?? undefined;
    const bound = maxAttempts ?? LEGACY_MAX_ATTEMPTS;
    if (countsAgainstBound(reason) && attemptsCounted >= bound) {
      const why = `the agent step gave up after ${attemptsCounted} attempts (at most ${bound}): ${message ?? reason}`;
      return { source: 'agent', type: 'agent_error', data: { code, message: why }, cause };
    }
    const data = { item_id: String(stepCause), attempt: attempt + 1, reason, ...(message && { message }) };
    return { source: 'agent', type: 'agent_attempt', data, cause };
  };
}

/**
 * A user action as stored. An interrupt, or a stop while the agent works,
 * stores in the same change what the step and the command leave; a message
 * while the agent works under `double_texting: interrupt` is an interrupt first.
 */
export function userProposals(
  snapshot: SessionSnapshot,
  action: UserAction,
  streamed: Streamed | undefined,
): Proposal[] {
  const event = userEvent(action);
  const works = snapshot.matches({ active: 'running' });
  if (action.type === 'interrupt') return [{ together: [event, ...cutWork(snapshot, streamed, 'interrupt')] }];
  if (action.type === 'change_agent_state' && action.state === 'stopped' && works)
    return [{ together: [event, ...cutWork(snapshot, streamed, 'stop')] }];
  if (action.type === 'message' && snapshot.context.doubleTexting === 'interrupt' && agentWorks(snapshot)) {
    const interrupt = userEvent({ type: 'interrupt' });
    return [{ together: [interrupt, ...cutWork(snapshot, streamed, 'interrupt')] }, event];
  }
  return [...unrunCalls(snapshot, action), event];
}

/**
 * What an interrupt or a stop leaves of the work it cuts: the agent's message
 * holding what the step's current attempt streamed (none when nothing was), and
 * the running command's output, cancelled by the user. Nothing else of the step
 * is stored: its effects are aborted once the state no longer asks for them.
 */
export function cutWork(
  snapshot: SessionSnapshot,
  streamed: Streamed | undefined,
  by: 'interrupt' | 'stop',
): NewEvent[] {
  const out: NewEvent[] = [];
  const { stepCause, attempt, pendingCommand } = snapshot.context;
  const thinking = snapshot.matches({ active: { running: 'thinking' } });
  if (thinking && stepCause !== null && streamed?.itemId === String(stepCause) && streamed.attempt === attempt) {
    if (streamed.text !== '') {
      const data = { content: streamed.text, item_id: streamed.itemId, attempt, deltas: streamed.deltas };
      out.push({ source: 'agent', type: 'message', data: { ...data, interrupted: true }, cause: stepCause });
    }
  }
  if (pendingCommand && snapshot.matches({ active: { running: 'executing' } })) {
    const { output } = cancelled(by);
    out.push(callFailure(callInput(pendingCommand, by), output, by));
    out.push(
      ...queuedResults(snapshot, `the user ${by === 'interrupt' ? 'interrupted' : 'stopped'} the agent first`, by),
    );
  }
  return out;
}

/**
 * The results of the calls a rejection or a stop leaves unrun, stored before
 * it: the one waiting for confirmation (or held by a pause) and the reply's
 * later ones.
 */
function unrunCalls(snapshot: SessionSnapshot, action: UserAction): NewEvent[] {
  if (action.type !== 'change_agent_state' || !['user_rejected', 'stopped'].includes(action.state)) return [];
  const { pendingCommand } = snapshot.context;
  const waiting = snapshot.matches({ active: 'awaiting_user_confirmation' });
  if (!pendingCommand || !(waiting || (snapshot.matches({ active: 'paused' }) && pendingCommand.held))) return [];
  if (action.state === 'user_rejected' && !waiting) return [];
  const why = action.state === 'user_rejected' ? 'the user rejected it' : 'the user stopped the agent';
  const queued = action.state === 'user_rejected' ? 'the user rejected a call before it' : why;
  return [callFailure(callInput(pendingCommand, why), `not run: ${why}`), ...queuedResults(snapshot, queued)];
}

/** The output of a command the user cancelled while it ran. */
export function cancelled(by: 'interrupt' | 'stop'): CommandResult {
  const who = by === 'interrupt' ? 'interrupted the agent' : 'stopped the agent';
  return {
    exit_code: null,
    output: `cancelled: the user ${who} while this command ran; its processes were sent SIGINT, then SIGKILL`,
    timed_out: false,
    truncated: false,
    cancelled: by,
  };
}

export function userEvent(action: UserAction): NewEvent {
  switch (action.type) {
    case 'message':
      return { source: 'user', type: 'message', data: { content: action.content } };
    case 'run':
      return { source: 'user', type: 'command', data: { command: action.command } };
    case 'change_agent_state':
      return { source: 'user', type: 'change_agent_state', data: { state: action.state } };
    case 'reconnect_runtime':
      return { source: 'user', type: 'reconnect_runtime', data: {} };
    case 'interrupt':
      return { source: 'user', type: 'interrupt', data: {} };
  }
}

export function commandOutput(cause: number, command: string, result: CommandResult, callId?: string): NewEvent {
  const data = { command, ...result, ...(callId !== undefined && { call_id: callId }) };
  return { source: 'environment', type: 'command_output', data, cause };
}

/** The observation for a command (or tool call) that will never report: it is not run again. */
export function interrupted(input: CallInput): NewEvent {
  return callFailure(input, `interrupted: ${input.why}; it was not run again`);
}

/** The result of a command (or tool call) sent to a runtime that is not there. */
export function unavailableResult(input: CallInput): NewEvent {
  return callFailure(
    input,
    `the runtime is not available (${input.why}); the ${input.tool === undefined ? 'command' : 'call'} did not run to completion. Reconnect (refresh the page, or send reconnect_runtime) to start a new runtime in the same workspace.`,
  );
}

/** The facts of a workspace's repository; none for a conversation without one (refused). */
export function repositoryProposals(
  snapshot: SessionSnapshot,
  input: Extract<DecisionInput, { type: 'repository_cloned' | 'clone_failed' | 'instructions_loaded' }>,
): Proposal[] {
  const repository = snapshot.context.repository;
  if (!repository) return [];
  const { url, branch } = repository;
  switch (input.type) {
    case 'repository_cloned':
      return [
        { source: 'environment', type: 'repository_cloned', data: { url, branch: input.branch, commit: input.commit } },
      ];
    case 'clone_failed': {
      const data = { url, ...(branch !== undefined && { branch }), message: input.message };
      // A call out (or waiting) when a reconnect's clone fails is answered in the same decision, the reply's later calls too.
      const { pendingCommand } = snapshot.context;
      const why = `the repository ${url} could not be cloned: ${input.message}`;
      return [
        { source: 'environment', type: 'repository_clone_failed', data },
        ...(pendingCommand ? [unavailableResult(callInput(pendingCommand, why))] : []),
        ...queuedResults(snapshot, why),
      ];
    }
    case 'instructions_loaded':
      return [{ source: 'environment', type: 'instructions_loaded', data: { files: input.files } }];
  }
}
