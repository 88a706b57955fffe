import type { AgentState } from '../protocol/index.ts';

/** Base of Tether's own errors: a stable `code` for the edge to map, and the `cause`. */
export class TetherError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** No such conversation, or it belongs to someone else (indistinguishable on purpose). */
export class ConversationNotFoundError extends TetherError {
  constructor(conversationId: string) {
    super('CONVERSATION_NOT_FOUND', `conversation ${conversationId} does not exist`);
  }
}

/** The decider refused the action in the conversation's current state; `message` says why. */
export class IllegalTransitionError extends TetherError {
  readonly state: AgentState;
  constructor(reason: string, state: AgentState) {
    super('ILLEGAL_TRANSITION', reason);
    this.state = state;
  }
}

/**
 * A message came while the agent works, in a conversation whose
 * `double_texting` is `reject`: nothing was stored (409 over REST).
 */
export class AgentBusyError extends TetherError {
  readonly state: AgentState;
  constructor(reason: string, state: AgentState) {
    super('AGENT_BUSY', reason);
    this.state = state;
  }
}

/**
 * The conversation's session on this node was released (it left memory,
 * another writer took over, its lease lapsed, the log failed): the action
 * was not applied here; asking again reaches the session that runs it now.
 */
export class SessionUnavailableError extends TetherError {
  constructor(conversationId: string, reason: string, options?: { cause?: unknown }) {
    super(
      'SESSION_UNAVAILABLE',
      `conversation ${conversationId} is not running here now (${reason}): try again`,
      options,
    );
  }
}

/** A draining node starts no new conversation: another node will. */
export class NodeDrainingError extends TetherError {
  constructor() {
    super('NODE_DRAINING', 'this node is shutting down: try again (another node takes new conversations)');
  }
}

/** A stream sequence that is not one of the conversation's events. */
export class BadSeqError extends TetherError {
  constructor(conversationId: string, seq: number | string) {
    super(
      'BAD_SEQ',
      `seq ${seq} is not an event of conversation ${conversationId}: give the seq of one of its events (GET /api/conversations/${conversationId}/events lists them)`,
    );
  }
}
