// Questions the end-to-end tests ask of a conversation's stored log.
import { expect } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';

/** The agent state the last `agent_state_changed` recorded, or 'none'. */
export function stateOf(events: readonly LoggedEvent[]): string {
  const fact = events.findLast((e) => e.event.type === 'agent_state_changed')?.event;
  return fact?.type === 'agent_state_changed' ? fact.data.state : 'none';
}

/** The log ends with the agent waiting for the user: nothing more comes by itself. */
export function endsAwaiting(events: readonly LoggedEvent[]): boolean {
  const last = events.at(-1)?.event;
  return last?.type === 'agent_state_changed' && last.data.state === 'awaiting_user_input';
}

export function userMessage(events: readonly LoggedEvent[], content: string): LoggedEvent | undefined {
  return events.find(
    (e) => e.event.source === 'user' && e.event.type === 'message' && e.event.data.content === content,
  );
}

/** The scripted agent's messages that answer the user message with this content (it quotes what it answers). */
export function repliesTo(events: readonly LoggedEvent[], content: string): LoggedEvent[] {
  const quote = `You said: "${content}".`;
  return events.filter(
    (e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.data.content.startsWith(quote),
  );
}

/** Ids dense from 0 and seqs increasing, as a conversation's log must have them. */
export function expectDenseIds(events: readonly LoggedEvent[]): void {
  expect(events.map((e) => e.event.id)).toEqual(events.map((_, i) => i));
  expect(events.every((e, i) => i === 0 || e.seq > events[i - 1]!.seq)).toBe(true);
}
