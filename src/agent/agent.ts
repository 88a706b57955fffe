import type { StoredEvent } from '../../protocol/index.ts';

/** What producing an action cost (stored as an `agent_usage` event before the action). */
export interface AgentUsage {
  prompt_tokens: number;
  completion_tokens: number;
  /** USD, 0 when no price is configured. */
  cost: number;
}

/**
 * The agent's next move, with what it cost when an LLM produced it. A move
 * made from a tool call keeps the text the model streamed with it in
 * `thought` (a text message's streamed text is its `content`).
 */
export type AgentAction = AgentMove & { usage?: AgentUsage; thought?: string };

export type AgentMove =
  /**
   * Say something and wait for the user; with `waitForResponse: false`, say it
   * and go on with another step (the agent has more to answer). `callId`: the
   * model's `ask_user` call it was made from.
   */
  | { type: 'message'; content: string; waitForResponse?: boolean; callId?: string }
  /**
   * Run a shell command in the conversation's runtime; its output comes back as
   * an observation. `securityRisk`: the agent's own rating (none: UNKNOWN).
   */
  | { type: 'run'; command: string; securityRisk?: 'LOW' | 'MEDIUM' | 'HIGH' }
  /** The tool calls of one reply, as the model made them: each is stored and answered, in order. */
  | { type: 'calls'; calls: AgentToolCall[] }
  /** The task is done. `callId`: the model's `finish` call it was made from. */
  | { type: 'finish'; content: string; callId?: string };

/** One tool call as the model made it: its id, the tool's name and the arguments (a JSON object). */
export interface AgentToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export interface AgentStepInput {
  signal?: AbortSignal;
  /**
   * The reply's text as it is generated, one piece per call, in order. An agent
   * that streams calls it for every piece; the pieces joined are exactly the
   * action's `content` (a text message) or `thought` (a tool call). Never
   * called by an agent that does not stream.
   */
  onDelta?: (text: string) => void;
}

/**
 * What an agent knows of one conversation, built up one stored event at a
 * time, so a step costs the same at the conversation's 10,000th event as at
 * its 10th: the session tells it every event once, in order, as it is stored
 * (and, when the session comes back into memory, the events before, once),
 * and never hands it the whole history again.
 */
export interface AgentContext {
  /**
   * The conversation's next stored event (ids 0, 1, 2... without a gap). Runs
   * inside the session's append: cheap bookkeeping, no I/O, and it must not
   * throw. Keep what the next steps need, not every event.
   */
  observe(event: StoredEvent): void;
  /**
   * The next action, from the events observed so far. Events stored while it
   * runs are observed meanwhile: read what you need before the first `await`.
   * The same events observed give the same action (an LLM aside).
   */
  step(input?: AgentStepInput): Promise<AgentAction>;
}

/** Where a conversation's next action comes from: an LLM, a script or a recording. */
export interface Agent {
  /** A fresh context for conversation `conversationId`, which has observed nothing yet. */
  context(conversationId: string): AgentContext;
}
