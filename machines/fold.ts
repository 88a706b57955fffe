import { initialTransition, transition } from 'xstate';
import type { StoredEvent } from '../src/protocol/index.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
import { sessionMachine, type SessionInput, type SessionSnapshot } from './sessionMachine.ts';

export interface FoldStep {
  /** Stream sequence of the stored event, when the caller gave one. */
  seq?: number;
  eventId: number;
  event: SessionEvent;
  from: SessionSnapshot['value'];
  to: SessionSnapshot['value'];
}

export interface Fold {
  snapshot: SessionSnapshot;
  /** Stored events folded (machine events and facts alike). */
  folded: number;
  /** Every machine event that moved the fold, with the state before and after (for `tether replay`). */
  steps: FoldStep[];
}

export interface FoldOptions {
  /** Continue from this snapshot instead of the conversation's first event. */
  from?: SessionSnapshot;
  /** Record every step (costs memory; for debugging). */
  trace?: boolean;
}

/** The machine's input, from a conversation's first event. */
export function inputFrom(created: Extract<StoredEvent, { type: 'conversation_created' }>): SessionInput {
  const timeout = created.data.start_timeout_ms;
  return {
    conversationId: created.conversation_id,
    user: created.data.user,
    maxIterations: created.data.max_iterations,
    confirmationMode: created.data.confirmation_mode,
    startDeadline: timeout === undefined ? null : Date.parse(created.ts) + timeout,
  };
}

/**
 * Rebuilds a session from its stored events with the pure `transition()`: no
 * effect runs. Without `from`, the first event must be `conversation_created`.
 * Accepts stored events or `{seq, event}` pairs.
 */
export function foldEvents(events: Iterable<StoredEvent | { seq: number; event: StoredEvent }>, options: FoldOptions = {}): Fold {
  let snapshot = options.from;
  let folded = 0;
  const steps: FoldStep[] = [];
  for (const item of events) {
    const [stored, seq] = 'seq' in item ? [item.event, item.seq] : [item, undefined];
    folded += 1;
    if (snapshot === undefined) {
      if (stored.type !== 'conversation_created') {
        throw new Error(`a conversation log starts with conversation_created, not ${stored.type}`);
      }
      [snapshot] = initialTransition(sessionMachine, inputFrom(stored));
      continue;
    }
    const event = toSessionEvent(stored);
    if (event === null) continue;
    const [next] = transition(sessionMachine, snapshot, event);
    if (options.trace) steps.push({ ...(seq !== undefined && { seq }), eventId: stored.id, event, from: snapshot.value, to: next.value });
    snapshot = next;
  }
  if (snapshot === undefined) throw new Error('an empty log holds no conversation');
  return { snapshot, folded, steps };
}
