import { initialTransition, transition } from 'xstate';
import type { StoredEvent } from '../src/protocol/index.ts';
import { sessionMachine, type SessionSnapshot } from './sessionMachine.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';

export interface Fold {
  snapshot: SessionSnapshot;
  /** Every machine event that moved the fold, with the state before and after (for `tether replay`). */
  steps: Array<{ event: SessionEvent; from: SessionSnapshot['value']; to: SessionSnapshot['value'] }>;
}

/**
 * Rebuilds a session from its stored events with the pure `transition()`:
 * no effect runs. The first event must be `conversation_created`.
 */
export function foldEvents(events: Iterable<StoredEvent>, options: { trace?: boolean } = {}): Fold {
  let snapshot: SessionSnapshot | undefined;
  const steps: Fold['steps'] = [];
  for (const stored of events) {
    if (snapshot === undefined) {
      if (stored.type !== 'conversation_created') {
        throw new Error(`a conversation log starts with conversation_created, not ${stored.type}`);
      }
      [snapshot] = initialTransition(sessionMachine, {
        conversationId: stored.conversation_id,
        maxIterations: stored.data.max_iterations,
      });
      continue;
    }
    const event = toSessionEvent(stored);
    if (event === null) continue;
    const [next] = transition(sessionMachine, snapshot, event);
    if (options.trace) steps.push({ event, from: snapshot.value, to: next.value });
    snapshot = next;
  }
  if (snapshot === undefined) throw new Error('an empty log holds no conversation');
  return { snapshot, steps };
}
