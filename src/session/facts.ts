import { agentStateOf, type SessionEvent, type SessionSnapshot } from '../../machines/index.ts';
import type { NewEvent } from '../protocol/index.ts';

/** The `agent_state_changed` fact a transition produces, or null when the agent state stayed. */
export function stateFact(
  before: SessionSnapshot,
  after: SessionSnapshot,
): Extract<NewEvent, { type: 'agent_state_changed' }> | null {
  const state = agentStateOf(after);
  if (state === agentStateOf(before)) return null;
  const reason = state === 'error' || state === 'rate_limited' ? after.context.error : null;
  return { source: 'environment', type: 'agent_state_changed', data: reason ? { state, reason } : { state } };
}

/** What a user tried, in words, for an error that names the state which refused it. */
export function describeEvent(event: SessionEvent): string {
  switch (event.type) {
    case 'user.message':
      return 'send a message';
    case 'user.run':
      return 'run a command';
    case 'user.change_state':
      return `change the agent state to ${event.state}`;
    default:
      return `apply ${event.type}`;
  }
}
