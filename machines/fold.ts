import type { StoredEvent } from '../protocol/index.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
import { inputFrom } from './input.ts';
import type { SessionSnapshot } from './sessionMachine.ts';
import { initialSnapshot, nextSnapshot } from './step.ts';
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
 * Rebuilds a session from its stored events, stepping the machine once per
 * machine event (`step.ts`, as the decider does): no effect runs, no agent is
 * called (effects are read from the state, by the host, never run by the
 * machine). Events written under an older machine version are upcast first.
 * Without `from`, the first event must be `conversation_created`. Accepts
 * stored events or `{seq, event}` pairs. Throws what the machine throws.
 */
export function foldEvents(
  events: Iterable<StoredEvent | { seq: number; event: StoredEvent }>,
  options: FoldOptions = {},
): Fold {
  let snapshot = options.from;
  // Events of a log written under an older machine version read as this version reads them.
  let upcast = snapshot ? upcasterFor(snapshot.context.machineVersion) : null;
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
      snapshot = initialSnapshot(input);
      upcast = upcasterFor(input.machineVersion);
      continue;
    }
    const event = toSessionEvent(upcast ? upcast(stored) : stored);
    if (stored.type === 'machine_upgraded') upcast = upcasterFor(stored.data.to);
    if (event === null) continue;
    const next = nextSnapshot(snapshot, event);
    if (options.trace) {
      steps.push({
        ...(seq !== undefined && { seq }),
        eventId: stored.id,
        event,
        from: snapshot.value,
        to: next.value,
      });
    }
    snapshot = next;
  }
  if (snapshot === undefined) throw new Error('an empty log holds no conversation');
  return { snapshot, folded, steps };
}
