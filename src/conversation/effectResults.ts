import type { AgentAnswer } from '../../machines/index.ts';
import { rateCommand, type AgentAction } from '../agent/index.ts';
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

/** An agent's action as the decider takes it (a command rated for risk here, where the analyzer lives). */
export function answerOf(action: AgentAction): AgentAnswer {
  const thought = action.thought === undefined ? {} : { thought: action.thought };
  switch (action.type) {
    case 'message':
      return action.waitForResponse === false
        ? { type: 'message', content: action.content, waitForResponse: false, ...thought }
        : { type: 'message', content: action.content, ...thought };
    case 'run':
      return { type: 'run', command: action.command, risk: rateCommand(action.command), ...thought };
    case 'finish':
      return { type: 'finish', content: action.content, ...thought };
  }
}

/** How an effect's work ended, in a word, for debug lines. */
export function outcomeOf(result: unknown): string {
  if (typeof result === 'string') return result;
  if (result === null) return 'not started';
  // A runtime start returns the runtime; other work returns nothing.
  return result === undefined ? 'done' : 'connected';
}
