import type { AgentAnswer, AnswerCall } from '../../machines/index.ts';
import { rateCall, type AgentAction, type AgentToolCall } from '../agent/index.ts';
import type { StatusFrame } from '../../protocol/index.ts';

/** The transient status frames effects send on the way (never stored). */
export const STATUS = {
  starting: { level: 'info', id: 'STATUS$STARTING_RUNTIME', message: 'Starting the runtime...' },
  connecting: { level: 'info', id: 'STATUS$CONNECTING_RUNTIME', message: 'Connecting to the runtime...' },
  setting_up: { level: 'info', id: 'STATUS$SETTING_UP_WORKSPACE', message: 'Setting up the workspace...' },
  connected: { level: 'info', id: 'STATUS$RUNTIME_CONNECTED', message: 'The runtime is ready.' },
  cloning: { level: 'info', id: 'STATUS$CLONING_REPOSITORY', message: 'Cloning the repository...' },
  cloneFailed: { level: 'error', id: 'STATUS$ERROR_CLONE', message: 'The repository could not be cloned.' },
  failed: { level: 'error', id: 'STATUS$ERROR_RUNTIME_DISCONNECTED', message: 'The runtime is not available.' },
  llmAuthentication: { level: 'error', id: 'STATUS$ERROR_LLM_AUTHENTICATION', message: 'The LLM refused the API key.' },
  rateLimited: {
    level: 'warning',
    id: 'STATUS$LLM_RATE_LIMITED',
    message: 'The LLM is rate limiting; the step is tried again shortly.',
  },
} as const satisfies Record<string, Omit<StatusFrame, 'type'>>;

/**
 * An agent's action as the decider takes it: each call rated here, where the
 * rules live (the decider combines the ratings when it stores the call).
 */
export function answerOf(action: AgentAction): AgentAnswer {
  const thought = action.thought === undefined ? {} : { thought: action.thought };
  const callId = 'callId' in action && action.callId !== undefined ? { callId: action.callId } : {};
  switch (action.type) {
    case 'message':
      return action.waitForResponse === false
        ? { type: 'message', content: action.content, waitForResponse: false, ...callId, ...thought }
        : { type: 'message', content: action.content, ...callId, ...thought };
    case 'run': {
      const args = { command: action.command, ...(action.securityRisk && { security_risk: action.securityRisk }) };
      // Not a model's call: no id is stored (the model would be sent `call_<event id>`).
      const call = { command: action.command, ...rateCall('run_command', args) };
      return { type: 'calls', calls: [call], ...thought };
    }
    case 'calls':
      return { type: 'calls', calls: action.calls.map(answerCall), ...thought };
    case 'finish':
      return { type: 'finish', content: action.content, ...callId, ...thought };
  }
}

/** A shell command when it is a `run_command` with a command, else a tool call as made. */
function answerCall(call: AgentToolCall): AnswerCall {
  const rating = rateCall(call.name, call.arguments);
  const command = call.arguments.command;
  if (call.name === 'run_command' && typeof command === 'string' && command.trim() !== '') {
    return { callId: call.id, command, ...rating };
  }
  return { callId: call.id, tool: call.name, arguments: call.arguments, ...rating };
}

/** How an effect's work ended, in a word, for debug lines. */
export function outcomeOf(result: unknown): string {
  if (typeof result === 'string') return result;
  if (result === null) return 'not started';
  // A runtime start returns the runtime; other work returns nothing.
  return result === undefined ? 'done' : 'connected';
}
