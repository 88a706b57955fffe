import type { AgentState } from '../protocol/index.ts';
import { sessionMachine, type SessionSnapshot } from './sessionMachine.ts';

/** The agent state a snapshot shows to users (while passivated: the state it comes back in). */
export function agentStateOf(snapshot: SessionSnapshot): AgentState {
  if (snapshot.context.resumeState !== null && snapshot.matches('passivated')) return snapshot.context.resumeState;
  // Every state node users can see carries exactly one agent-state tag.
  for (const tag of snapshot.tags) if (tag !== 'busy') return tag as AgentState;
  return 'loading';
}

/** Whether the agent works by itself in this snapshot (never passivated for idleness). */
export function isBusy(snapshot: SessionSnapshot): boolean {
  return snapshot.hasTag('busy');
}

/** The agent states whose machine states carry `busy`, read from the machine (for logs, which hold agent states). */
export const BUSY_AGENT_STATES: ReadonlySet<AgentState> = (() => {
  const found = new Set<AgentState>();
  const visit = (node: { tags: readonly string[]; states: Record<string, unknown> }) => {
    if (node.tags.includes('busy')) for (const tag of node.tags) if (tag !== 'busy') found.add(tag as AgentState);
    for (const child of Object.values(node.states)) visit(child as typeof node);
  };
  visit(sessionMachine.root);
  return found;
})();
