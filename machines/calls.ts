import type { EventOf, NewEvent } from '../protocol/index.ts';
import type { AgentAnswer, AnswerCall } from './decide.ts';
import type { PendingCommand } from './sessionContext.ts';
import type { SessionSnapshot } from './sessionMachine.ts';

// The agent's calls as stored (machines/proposals.ts has the rest of what the decider proposes).

type ToolResultData = EventOf<'tool_result'>['data'];

/** What a call's result needs to know of the call: a shell command's text, or a tool call's id and tool. */
export interface CallInput {
  cause: number;
  command: string;
  why: string;
  callId?: string;
  tool?: string;
}

/**
 * An answer as stored: the item (its step), the attempt and how many deltas
 * it streamed ride along on every event it makes; the streamed text
 * (`thought`) on the first. A reply's calls are stored together, in order.
 */
export function agentEvents(
  answer: AgentAnswer,
  { cause, attempt, deltas }: { cause: number; attempt: number; deltas: number },
  confirmUnknown: boolean,
): NewEvent[] {
  const item = { item_id: String(cause), attempt, deltas };
  const thought = answer.thought === undefined ? {} : { thought: answer.thought };
  const callId = 'callId' in answer && answer.callId !== undefined ? { call_id: answer.callId } : {};
  switch (answer.type) {
    case 'message': {
      const { content, waitForResponse } = answer;
      const data = {
        content,
        ...item,
        ...callId,
        ...(waitForResponse === false && { wait_for_response: false as const }),
      };
      return [{ source: 'agent', type: 'message', data, cause }];
    }
    case 'run':
      return [
        {
          source: 'agent',
          type: 'command',
          data: {
            command: answer.command,
            risk: answer.risk,
            needs_confirmation: answer.risk === 'high',
            ...item,
            ...thought,
          },
          cause,
        },
      ];
    case 'calls':
      return answer.calls.map((call, i) =>
        callEvent(call, { ...item, ...(i === 0 && thought) }, cause, confirmUnknown),
      );
    case 'finish':
      return [
        { source: 'agent', type: 'finish', data: { content: answer.content, ...callId, ...item, ...thought }, cause },
      ];
  }
}

/**
 * Whether a call waits in confirmation mode, decided once, as it is stored: the
 * higher of the model's rating and the rules' (a floor: `high` is HIGH) is
 * HIGH, or UNKNOWN while `confirmUnknown` holds. A call that does not act
 * (no model rating) never waits.
 */
export function needsConfirmation(call: Pick<AnswerCall, 'risk' | 'securityRisk'>, confirmUnknown: boolean): boolean {
  if (call.securityRisk === undefined) return false;
  const result = call.risk === 'high' ? 'HIGH' : call.securityRisk;
  return result === 'HIGH' || (result === 'UNKNOWN' && confirmUnknown);
}

function callEvent(
  call: AnswerCall,
  item: { item_id: string; attempt: number; deltas: number; thought?: string },
  cause: number,
  confirmUnknown: boolean,
): NewEvent {
  const ratings = {
    risk: call.risk,
    ...(call.securityRisk !== undefined && { security_risk: call.securityRisk }),
    needs_confirmation: needsConfirmation(call, confirmUnknown),
  };
  if ('command' in call) {
    return {
      source: 'agent',
      type: 'command',
      data: { command: call.command, ...(call.callId !== undefined && { call_id: call.callId }), ...ratings, ...item },
      cause,
    };
  }
  const data = { call_id: call.callId, tool: call.tool, arguments: call.arguments, ...ratings, ...item };
  return { source: 'agent', type: 'tool_call', data, cause };
}

export function toolResult(cause: number, data: ToolResultData): NewEvent {
  return { source: 'environment', type: 'tool_result', data, cause };
}

/** The model's id of pending or queued call `cause`, when it has one. */
export function callOf(snapshot: SessionSnapshot, cause: number): string | undefined {
  const { pendingCommand, queuedCalls } = snapshot.context;
  const call = pendingCommand?.eventId === cause ? pendingCommand : queuedCalls.find((c) => c.eventId === cause);
  return call?.callId;
}

/** A kept call, as the input of its result. */
export function callInput(call: PendingCommand, why: string): CallInput {
  return {
    cause: call.eventId,
    command: call.command,
    why,
    ...(call.callId !== undefined && { callId: call.callId }),
    ...(call.tool && { tool: call.tool.name }),
  };
}

/** The result of a call that never ran, or did not finish: a `tool_result` for a tool, else a `command_output`. */
export function callFailure(input: CallInput, output: string, cancelled?: 'interrupt' | 'stop'): NewEvent {
  const { cause, callId, tool } = input;
  if (tool !== undefined) {
    const data = { call_id: callId ?? `call_${cause}`, tool, output, is_error: true, ...(cancelled && { cancelled }) };
    return toolResult(cause, data);
  }
  const data = {
    command: input.command,
    exit_code: null,
    output,
    timed_out: false,
    truncated: false,
    ...(cancelled && { cancelled }),
    ...(callId !== undefined && { call_id: callId }),
  };
  return { source: 'environment', type: 'command_output', data, cause };
}

/** The results of the calls of a reply still waiting their turn: none of them runs (`cancelled`: by the user). */
export function queuedResults(snapshot: SessionSnapshot, why: string, cancelled?: 'interrupt' | 'stop'): NewEvent[] {
  return snapshot.context.queuedCalls.map((call) => callFailure(callInput(call, why), `not run: ${why}`, cancelled));
}
