import type { StateValue } from 'xstate';
import type { AgentState, LoggedEvent, StoredEvent } from '../protocol/index.ts';
import { agentStateOf } from './agentState.ts';
import { foldEvents } from './fold.ts';
import type { SessionContext } from './sessionContext.ts';
import type { SessionSnapshot } from './sessionMachine.ts';

/*
 * Inspection of a stored conversation: the state right after any of its
 * events, and what each event did to the statechart. Pure and browser-safe
 * (no `node:*`, no I/O): the server's `GET .../state`, `tether replay` and
 * the page use this one module. The caller reads the events; nothing here
 * runs an effect or stores anything.
 */

/** A transition as state paths: `{from: ['active.awaiting_user_input'], to: ['active.running.thinking']}`. */
export interface Transition {
  /** Empty for the creation, which starts the machine. */
  from: string[];
  to: string[];
}

/** A conversation right after one of its events. */
export interface StateAt {
  seq: number;
  state: AgentState;
  value: StateValue;
  context: SessionContext;
  /** The stored event at `seq`. */
  event: StoredEvent;
  /** What that event did to the statechart; null for a fact the machine does not take. */
  transition: Transition | null;
}

/** One stored event and the transition it caused, if any (a line of `tether replay`). */
export interface TraceStep {
  seq: number;
  id: number;
  type: string;
  source: string;
  /** The machine event: `xstate.init` for the creation, null for a stored fact the machine does not take. */
  event: string | null;
  from: string | null;
  to: string | null;
  /** For a stored `agent_state_changed`: the agent state the host recorded, to compare with the fold. */
  recorded_agent_state?: string;
}

/** A state value as dotted paths: `{active: {running: 'thinking'}}` → `['active.running.thinking']`. */
export function statePaths(value: StateValue): string[] {
  if (typeof value === 'string') return [value];
  return Object.entries(value).flatMap(([key, child]) =>
    child === undefined || (typeof child === 'object' && Object.keys(child).length === 0)
      ? [key]
      : statePaths(child).map((path) => `${key}.${path}`),
  );
}

/** A point to fold from instead of the first event: the state through `seq` (a checkpoint). */
export interface FoldStart {
  seq: number;
  snapshot: SessionSnapshot;
}

/**
 * The conversation right after its event at `atSeq`. `events` are the
 * conversation's events in order: all of them, or those after `start.seq`
 * when folding from a checkpoint; events after `atSeq` are not read.
 * Undefined when none of them is at `atSeq`.
 */
export function stateAt(events: Iterable<LoggedEvent>, atSeq: number, start?: FoldStart): StateAt | undefined {
  const before: LoggedEvent[] = [];
  let target: LoggedEvent | undefined;
  for (const item of events) {
    if (start && item.seq <= start.seq) continue;
    if (item.seq > atSeq) break;
    if (item.seq === atSeq) {
      target = item;
      break;
    }
    before.push(item);
  }
  if (target === undefined) return undefined;
  const event = target.event;
  if (before.length === 0 && start === undefined) {
    // The creation: the machine's first state.
    const { snapshot } = foldEvents([event]);
    return at(target, snapshot, { from: [], to: statePaths(snapshot.value) });
  }
  const prior = foldEvents(before, start ? { from: start.snapshot } : {}).snapshot;
  const { snapshot, steps } = foldEvents([event], { from: prior, trace: true });
  const [step] = steps;
  return at(target, snapshot, step ? { from: statePaths(step.from), to: statePaths(step.to) } : null);
}

function at(target: LoggedEvent, snapshot: SessionSnapshot, transition: Transition | null): StateAt {
  return {
    seq: target.seq,
    state: agentStateOf(snapshot),
    value: snapshot.value,
    context: snapshot.context,
    event: target.event,
    transition,
  };
}

/**
 * Every event of `logged` (a conversation's events from its creation, in
 * order) with the transition it caused, and the fold's final snapshot.
 * Throws when the log does not fold (a machine event naming an event that is
 * not there, or one the machine refuses to take).
 */
export function traceLog(logged: readonly LoggedEvent[]): { steps: TraceStep[]; snapshot: SessionSnapshot } {
  const [first] = logged;
  if (first === undefined) throw new Error('no events to fold');
  const fold = foldEvents(
    logged.map((l) => l.event),
    { trace: true },
  );
  const transitions = new Map(fold.steps.map((step) => [step.event.eventId, step]));
  if (transitions.size !== fold.steps.length) throw new Error('two machine events name the same stored event id');
  const initial = foldEvents([first.event]).snapshot.value;
  const text = (value: StateValue) => statePaths(value).join(', ');
  const steps = logged.map((l, i): TraceStep => {
    const base = { seq: l.seq, id: l.event.id, type: l.event.type, source: l.event.source };
    if (i === 0) return { ...base, event: 'xstate.init', from: null, to: text(initial) };
    const step = transitions.get(l.event.id);
    transitions.delete(l.event.id);
    if (step) return { ...base, event: step.event.type, from: text(step.from), to: text(step.to) };
    const recorded = l.event.type === 'agent_state_changed' ? { recorded_agent_state: l.event.data.state } : {};
    return { ...base, event: null, from: null, to: null, ...recorded };
  });
  const [orphan] = transitions.values();
  if (orphan)
    throw new Error(`machine event ${orphan.event.type} names event id ${orphan.event.eventId}, not in the log`);
  return { steps, snapshot: fold.snapshot };
}
