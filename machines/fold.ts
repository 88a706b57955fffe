import { createActor, initialTransition, type ActorScope } from 'xstate';
import type { StoredEvent } from '../src/protocol/index.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
import {
  DEFAULT_RATE_LIMIT_RETRIES,
  sessionMachine,
  type SessionInput,
  type SessionSnapshot,
} from './sessionMachine.ts';

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
    maxBudget: created.data.max_budget ?? null,
    maxRateLimitRetries: DEFAULT_RATE_LIMIT_RETRIES,
    confirmationMode: created.data.confirmation_mode,
    startDeadline: timeout === undefined ? null : Date.parse(created.ts) + timeout,
  };
}

/**
 * A pure step function for one fold: the machine's own `transition` with an
 * inert scope whose action executor runs nothing. xstate's `transition()`
 * does the same but builds a fresh throw-away actor for every call, which made
 * folding a long log several times slower than reading it.
 */
function pureStepper(input: SessionInput): (snapshot: SessionSnapshot, event: SessionEvent) => SessionSnapshot {
  const self = createActor(sessionMachine, { input });
  const scope: ActorScope<SessionSnapshot, SessionEvent> = {
    self,
    id: self.id,
    sessionId: self.sessionId,
    logger: () => {},
    defer: () => {},
    emit: () => {},
    system: self.system,
    stopChild: () => {},
    actionExecutor: () => {},
  };
  return (snapshot, event) => sessionMachine.transition(snapshot, event, scope);
}

/**
 * Rebuilds a session from its stored events with the machine's pure
 * transition function: no effect runs, no agent is called. Without `from`, the first event must be `conversation_created`.
 * Accepts stored events or `{seq, event}` pairs.
 */
export function foldEvents(
  events: Iterable<StoredEvent | { seq: number; event: StoredEvent }>,
  options: FoldOptions = {},
): Fold {
  let snapshot = options.from;
  let step = snapshot ? pureStepper({ ...snapshot.context, startDeadline: null }) : undefined;
  let folded = 0;
  const steps: FoldStep[] = [];
  for (const item of events) {
    const [stored, seq] = 'seq' in item ? [item.event, item.seq] : [item, undefined];
    folded += 1;
    if (snapshot === undefined) {
      if (stored.type !== 'conversation_created') {
        throw new Error(`a conversation log starts with conversation_created, not ${stored.type}`);
      }
      const input = inputFrom(stored);
      [snapshot] = initialTransition(sessionMachine, input);
      step = pureStepper(input);
      continue;
    }
    const event = toSessionEvent(stored);
    if (event === null) continue;
    const next = step!(snapshot, event);
    if (options.trace)
      steps.push({
        ...(seq !== undefined && { seq }),
        eventId: stored.id,
        event,
        from: snapshot.value,
        to: next.value,
      });
    snapshot = next;
  }
  if (snapshot === undefined) throw new Error('an empty log holds no conversation');
  return { snapshot, folded, steps };
}
