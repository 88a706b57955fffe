import { expect } from 'vitest';
import {
  agentStateOf,
  foldEvents,
  sessionMachine,
  toSessionEvent,
  type PendingCommand,
  type SessionSnapshot,
} from '../../machines/index.ts';
import type { AgentState, StoredEvent } from '../../protocol/index.ts';

/** The persisted form of a snapshot: what a snapshot store keeps, and what two sessions must agree on. */
export function persisted(snapshot: SessionSnapshot): unknown {
  return sessionMachine.getPersistedSnapshot(snapshot);
}

/** `expect(actual).toEqual(expected)`, with a cheap path for the (usual) equal case. */
export function expectSame(actual: unknown, expected: unknown, message?: string): void {
  if (JSON.stringify(actual) === JSON.stringify(expected)) return;
  expect(actual, message).toEqual(expected);
}

/**
 * Folds a log one event at a time with `foldEvents` (continuing from the
 * previous snapshot, so a run costs one pass over its log) and notes what is
 * wrong with it: ids not dense from 0, a stored event the fold refuses, a
 * state change without its `agent_state_changed` right after it (caused by
 * it, naming the new state, with the error as reason), or such a fact where
 * the state did not change. Only what an interrupt or a stop cut (the step's
 * `interrupted` message, a `cancelled` command output or tool result) may come between such
 * a change and its fact: they are one change.
 */
export class LogChecker {
  readonly problems: string[] = [];
  #fold: SessionSnapshot | undefined;
  #count = 0;
  #due: { state: AgentState; reason?: string; cause: number } | null = null;

  /** The fold of every event so far. */
  get fold(): SessionSnapshot {
    if (!this.#fold) throw new Error('nothing folded yet');
    return this.#fold;
  }

  /** Folds the events not seen yet; `events` is the whole log, which only grows. */
  feed(events: readonly StoredEvent[]): SessionSnapshot {
    for (const event of events.slice(this.#count)) this.#step(event);
    this.#count = events.length;
    return this.fold;
  }

  #step(event: StoredEvent): void {
    if (event.id !== this.#count) this.problems.push(`event #${this.#count} has id ${event.id}`);
    this.#count += 1;
    if (!this.#fold) {
      if (event.type !== 'conversation_created') this.problems.push(`the log starts with ${event.type}`);
      this.#fold = foldEvents([event]).snapshot;
      return;
    }
    if (event.type === 'agent_state_changed') {
      const found = {
        state: event.data.state,
        ...(event.data.reason !== undefined && { reason: event.data.reason }),
        cause: event.cause,
      };
      if (!this.#due)
        this.problems.push(`event ${event.id}: agent_state_changed ${event.data.state} follows no state change`);
      else if (JSON.stringify(found) !== JSON.stringify(this.#due)) {
        this.problems.push(
          `event ${event.id}: fact ${JSON.stringify(found)}, the fold says ${JSON.stringify(this.#due)}`,
        );
      }
      this.#due = null;
      return;
    }
    const cutWork =
      (event.type === 'message' && event.data.interrupted === true) ||
      ((event.type === 'command_output' || event.type === 'tool_result') && event.data.cancelled !== undefined);
    if (this.#due && !cutWork)
      this.problems.push(`event ${event.id}: ${event.type} where agent_state_changed ${this.#due.state} was due`);
    const due = cutWork ? this.#due : null;
    this.#due = null;
    const machineEvent = toSessionEvent(event);
    if (!machineEvent) {
      this.problems.push(`event ${event.id}: ${event.type} is not a machine event`);
      return;
    }
    const before = this.#fold;
    if (!before.can(machineEvent))
      this.problems.push(`event ${event.id}: ${machineEvent.type} is stored but the fold refuses it`);
    const after = foldEvents([event], { from: before }).snapshot;
    const state = agentStateOf(after);
    if (state !== agentStateOf(before)) {
      const reason =
        (state === 'error' || state === 'rate_limited') && after.context.error ? after.context.error : undefined;
      this.#due = { state, ...(reason !== undefined && { reason }), cause: event.id };
    } else this.#due = due;
    this.#fold = after;
  }

  /** Problems, including a state fact still due at the end of the log (only meaningful at a quiet point). */
  report(): string[] {
    return this.#due
      ? [...this.problems, `the log ends where agent_state_changed ${this.#due.state} was due`]
      : this.problems;
  }
}

/** What is wrong with a whole stored log (see LogChecker). */
export function logViolations(events: readonly StoredEvent[]): string[] {
  const checker = new LogChecker();
  checker.feed(events);
  return checker.report();
}

/**
 * Copies of a log, each broken in one way the log invariants forbid: a state
 * fact naming another state, a state fact missing, a refused user action
 * stored, a gap in the ids. `at` chooses where. Used to show the checker bites.
 */
export function corruptedCopies(
  events: readonly StoredEvent[],
  at: number,
): Array<{ how: string; log: StoredEvent[] }> {
  const renumber = (log: StoredEvent[]) => log.map((e, id) => ({ ...e, id }));
  const facts = events.flatMap((e, i) => (e.type === 'agent_state_changed' ? [i] : []));
  const copies: Array<{ how: string; log: StoredEvent[] }> = [];
  const fact = facts[at % Math.max(1, facts.length)];
  if (fact !== undefined) {
    const wrong = events.map<StoredEvent>((e, i) =>
      i === fact && e.type === 'agent_state_changed'
        ? { ...e, data: { state: e.data.state === 'paused' ? 'stopped' : 'paused' } }
        : e,
    );
    copies.push({ how: 'a fact names another state', log: wrong });
    copies.push({ how: 'a fact is missing', log: renumber(events.filter((_, i) => i !== fact)) });
  }
  const where = 1 + (at % events.length);
  const refused = {
    ...events[0]!,
    source: 'user',
    type: 'change_agent_state',
    data: { state: 'loading' },
  } as StoredEvent;
  copies.push({
    how: 'a refused action is stored',
    log: renumber([...events.slice(0, where), refused, ...events.slice(where)]),
  });
  copies.push({
    how: 'the ids have a gap',
    log: events.map((e, i) => (i >= where - 1 && i > 0 ? { ...e, id: e.id + 1 } : e)),
  });
  return copies;
}

/** Lifecycle facts: they say how the session was hosted, not what was said or done in it. */
const LIFECYCLE = new Set<StoredEvent['type']>([
  'runtime_status',
  'session_passivated',
  'session_rehydrated',
  'machine_upgraded',
  'agent_state_changed',
  // A step cut by a passivation or a crash is asked again as its next attempt.
  'agent_attempt',
]);

/**
 * What a run must have in common with any other run of the same script,
 * however often it left memory (see passivationEquivalence for why each part).
 */
export function outcomeOf(snapshot: SessionSnapshot, events: readonly StoredEvent[]) {
  const kept = events.filter((e) => !LIFECYCLE.has(e.type));
  const position = new Map(kept.map((e, i) => [e.id, i]));
  const at = (id: number | undefined) => (id === undefined ? undefined : (position.get(id) ?? 'lifecycle'));
  const {
    iterations: _iterations,
    runtime: _runtime,
    stepCause,
    cutStep,
    pendingCommand,
    queuedCalls,
    lastMessageId,
    runtimeCause,
    runningSince,
    attempt: _attempt,
    ...context
  } = snapshot.context;
  return {
    state: agentStateOf(snapshot),
    value: snapshot.value,
    context: {
      ...context,
      stepPending: stepCause !== null,
      stepCut: cutStep !== null,
      // An event id and a time: compared as a position in the conversation, and as whether it runs.
      runtimeCause: at(runtimeCause),
      running: runningSince !== null,
      lastMessageId: lastMessageId === null ? null : at(lastMessageId),
      pendingCommand: pendingCommand && callOutcome(pendingCommand, at),
      queuedCalls: queuedCalls.map((call) => callOutcome(call, at)),
    },
    conversation: kept.map((e) => ({
      source: e.source,
      type: e.type,
      // The item is the step's request id and the attempt counts its hostings: neither belongs to the conversation.
      data: withoutItem(e.data),
      ...(e.type === 'command_output' && { cause: at(e.cause) }),
    })),
  };
}

/** A kept call: its step and attempt are the reply's request id and its hostings (like `item_id`), not the conversation's. */
function callOutcome(call: PendingCommand, at: (id: number | undefined) => number | 'lifecycle' | undefined) {
  const { step: _step, attempt: _attempt, ...rest } = call;
  return { ...rest, eventId: at(call.eventId) };
}

function withoutItem(data: object): object {
  if (!('item_id' in data)) return data;
  const { item_id: _item, attempt: _attempt, ...rest } = data as { item_id: unknown; attempt: unknown };
  return rest;
}
