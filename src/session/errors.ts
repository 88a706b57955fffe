import { TetherError } from '../errors.ts';
import type { AgentState } from '../protocol/index.ts';

/** No such conversation, or it belongs to someone else (indistinguishable on purpose). */
export class ConversationNotFoundError extends TetherError {
  constructor(conversationId: string) {
    super('CONVERSATION_NOT_FOUND', `conversation ${conversationId} does not exist`);
  }
}

/** The action is not allowed in the conversation's current state. */
export class IllegalTransitionError extends TetherError {
  readonly state: AgentState;
  constructor(what: string, state: AgentState) {
    super('ILLEGAL_TRANSITION', `cannot ${what} while the agent is ${state}`);
    this.state = state;
  }
}

/** The session stopped (another writer took over, or the server is shutting down). */
export class SessionClosedError extends TetherError {
  constructor(conversationId: string, reason: string, options?: { cause?: unknown }) {
    super('SESSION_CLOSED', `conversation ${conversationId} is closed here: ${reason}`, options);
  }
}
