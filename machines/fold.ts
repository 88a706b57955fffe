import { createActor } from 'xstate';
import type { StoredEvent } from '../protocol/index.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
import { inputFrom } from './input.ts';
import { sessionMachine, type SessionInput, type SessionSnapshot } from './sessionMachine.ts';
import { upcasterFor } from './upcasters.ts';

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

/**
 * One fold's steps, through a plain actor of the machine: its actions only
 * assign context, so an event only moves the state. Public xstate API only
 * (`createActor` with an input or a snapshot, `send`, `getSnapshot`), and as
 * fast as driving the machine's own `transition` with a hand-made actor scope.
 * xstate's `transition()` gives the same snapshots but builds a throw-away
 * actor and actor system for every call: about 5 times slower over a long
 * log (measured on xstate 5.33.3). Guarded by test/machines/fold.unit.test.ts
 * (this fold = `transition()` step by step) and by the property tests in
 * test/properties/foldEqualsLive.unit.test.ts (fold = the live session's actor).
 */
function stepper(input: SessionInput, from?: SessionSnapshot) {
  // From a snapshot the input is not read: the context comes with the snapshot.
  const actor = createActor(sessionMachine, { input, ...(from && { snapshot: from }) });
  let failure: { error: unknown } | null = null;
  // An error inside the machine stops the actor; the fold throws it, as `transition()` would.
  actor.subscribe({ error: (error) => void (failure = { error }) });
  actor.start();
  const snapshot = () => {
    if (failure) throw failure.error;
    return actor.getSnapshot();
  };
  return {
    snapshot,
    send(event: SessionEvent): SessionSnapshot {
      actor.send(event);
      return snapshot();
    },
  };
}

/**
 * Rebuilds a session from its stored events by sending them to an actor of
 * the machine: no effect runs, no agent is called (effects are read from the
 * state, by the host, never run by the machine). Events written under an
 * older machine version are upcast first. Without `from`, the
 * first event must be `conversation_created`. Accepts stored events or
 * `{seq, event}` pairs. Throws what the machine throws.
 */
export function foldEvents(
  events: Iterable<StoredEvent | { seq: number; event: StoredEvent }>,
  options: FoldOptions = {},
): Fold {
  let fold = options.from ? stepper(options.from.context, options.from) : undefined;
  // Events of a log written under an older machine version read as this version reads them.
  let upcast = options.from ? upcasterFor(options.from.context.machineVersion) : null;
  let folded = 0;
  const steps: FoldStep[] = [];
  for (const item of events) {
    const [stored, seq] = 'seq' in item ? [item.event, item.seq] : [item, undefined];
    folded += 1;
    if (fold === undefined) {
      if (stored.type !== 'conversation_created') {
        throw new Error(`a conversation log starts with conversation_created, not ${stored.type}`);
      }
      const input = inputFrom(stored);
      fold = stepper(input);
      upcast = upcasterFor(input.machineVersion);
      continue;
    }
    const event = toSessionEvent(upcast ? upcast(stored) : stored);
    if (stored.type === 'machine_upgraded') upcast = upcasterFor(stored.data.to);
    if (event === null) continue;
    if (!options.trace) {
      fold.send(event);
      continue;
    }
    const from = fold.snapshot().value;
    const to = fold.send(event).value;
    steps.push({ ...(seq !== undefined && { seq }), eventId: stored.id, event, from, to });
  }
  if (fold === undefined) throw new Error('an empty log holds no conversation');
  return { snapshot: fold.snapshot(), folded, steps };
}
