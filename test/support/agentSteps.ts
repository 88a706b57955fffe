import type { Agent, AgentAction, AgentStepInput } from '../../src/agent/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';

/** The action of an agent for a whole history at once, from a fresh context: what a session rebuilt from this history would get. */
export function stepOver(
  agent: Agent,
  history: Iterable<StoredEvent>,
  input?: AgentStepInput & { conversationId?: string },
): Promise<AgentAction> {
  const context = agent.context(input?.conversationId ?? 'c1');
  for (const event of history) context.observe(event);
  return context.step(input);
}
