import type { StoredEvent } from '../protocol/index.ts';

/** What producing an action cost (stored as an `agent_usage` event before the action). */
export interface AgentUsage {
  prompt_tokens: number;
  completion_tokens: number;
  /** USD, 0 when no price is configured. */
  cost: number;
}

/** The agent's next move, with what it cost when an LLM produced it. */
export type AgentAction = AgentMove & { usage?: AgentUsage };

export type AgentMove =
  /**
   * Say something and wait for the user; with `waitForResponse: false`, say it
   * and go on with another step (the agent has more to answer).
   */
  | { type: 'message'; content: string; waitForResponse?: boolean }
  /** Run a shell command in the conversation's runtime; its output comes back as an observation. */
  | { type: 'run'; command: string }
  /** The task is done. */
  | { type: 'finish'; content: string };

export interface AgentStepInput {
  conversationId: string;
  /**
   * Every stored event of the conversation so far, oldest first. It is the
   * session's own list: it may grow while the step runs, so read what you need
   * at the start, and never change it.
   */
  history: readonly StoredEvent[];
  signal?: AbortSignal;
}

/** Where a conversation's next action comes from: an LLM, a script or a recording. */
export interface Agent {
  step(input: AgentStepInput): Promise<AgentAction>;
}
