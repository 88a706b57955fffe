import { describe, expect, it } from 'vitest';
import { initialTransition, transition } from 'xstate';
import { foldEvents, inputFrom, sessionMachine, toSessionEvent, type SessionSnapshot } from '../../machines/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';

type Body = Pick<StoredEvent, 'source' | 'type' | 'data'> & { cause?: number };

/** A stored log from bodies: dense ids from 0, one second apart. */
function storedLog(bodies: Body[]): StoredEvent[] {
  return bodies.map(
    (body, id) =>
      ({
        v: 1,
        id,
        conversation_id: 'c1',
        ts: new Date(Date.UTC(2026, 0, 1, 0, 0, id)).toISOString(),
        ...body,
      }) as StoredEvent,
  );
}

/** A conversation that starts, runs a command for the agent, answers, is passivated, comes back and is closed. */
const log = storedLog([
  {
    source: 'user',
    type: 'conversation_created',
    data: {
      user: 'u',
      confirmation_mode: false,
      max_iterations: 5,
      secret_names: [],
      replay: false,
      start_timeout_ms: 60_000,
    },
  },
  { source: 'environment', type: 'runtime_status', data: { status: 'starting' } },
  { source: 'environment', type: 'runtime_status', data: { status: 'connecting' } },
  { source: 'environment', type: 'runtime_status', data: { status: 'connected' } },
  { source: 'environment', type: 'agent_state_changed', data: { state: 'awaiting_user_input' }, cause: 3 },
  { source: 'user', type: 'message', data: { content: 'list the files' } },
  { source: 'environment', type: 'agent_state_changed', data: { state: 'running' }, cause: 5 },
  { source: 'agent', type: 'agent_usage', data: { prompt_tokens: 10, completion_tokens: 2, cost: 0.25 } },
  { source: 'agent', type: 'command', data: { command: 'ls', risk: 'low' }, cause: 5 },
  {
    source: 'environment',
    type: 'command_output',
    data: { command: 'ls', exit_code: 0, output: 'a b', timed_out: false, truncated: false },
    cause: 8,
  },
  { source: 'agent', type: 'message', data: { content: 'a and b' }, cause: 9 },
  { source: 'environment', type: 'agent_state_changed', data: { state: 'awaiting_user_input' }, cause: 10 },
  { source: 'environment', type: 'runtime_status', data: { status: 'stopped' } },
  { source: 'environment', type: 'session_passivated', data: { reason: 'idle', state: 'awaiting_user_input' } },
  { source: 'environment', type: 'session_rehydrated', data: { from: 'snapshot', events_folded: 0 } },
  { source: 'environment', type: 'session_closed', data: { reason: 'deleted' } },
  { source: 'environment', type: 'agent_state_changed', data: { state: 'stopped' }, cause: 15 },
  // Nothing is stored after session_closed; a fold that meets such an event ignores it, like transition().
  { source: 'user', type: 'message', data: { content: 'too late' } },
]);

/** The same log through xstate's public pure functions, one event at a time. */
function byTransition(events: readonly StoredEvent[], from?: SessionSnapshot) {
  const first = events[0]!;
  let snapshot =
    from ??
    initialTransition(sessionMachine, inputFrom(first as Extract<StoredEvent, { type: 'conversation_created' }>))[0];
  const values: unknown[] = [];
  for (const stored of from ? events : events.slice(1)) {
    const event = toSessionEvent(stored);
    if (event === null) continue;
    [snapshot] = transition(sessionMachine, snapshot, event);
    values.push(snapshot.value);
  }
  return { snapshot, values };
}

const persisted = (snapshot: SessionSnapshot) => sessionMachine.getPersistedSnapshot(snapshot);

describe('foldEvents', () => {
  it('reaches the snapshot that xstate transition() reaches, one stored event at a time, through every state it traces', () => {
    const expected = byTransition(log);
    const fold = foldEvents(log, { trace: true });
    expect(fold.folded).toBe(log.length);
    expect(persisted(fold.snapshot)).toEqual(persisted(expected.snapshot));
    expect(fold.snapshot.status).toBe('done');
    expect(fold.steps.map((s) => s.to)).toEqual(expected.values);
    expect(fold.steps.map((s) => s.eventId)).toEqual(log.filter((e) => toSessionEvent(e) !== null).map((e) => e.id));
    expect(fold.steps[0]!.from).toEqual({ starting: 'creating' });
    expect(fold.snapshot.context.spent).toBe(0.25);
    expect(fold.snapshot.context.iterations).toBe(2);
  });

  it('continues from a snapshot exactly as the fold of the whole log, without running an effect again', () => {
    const head = foldEvents(log.slice(0, 7)).snapshot;
    expect(head.value).toEqual({ active: { running: 'thinking' } });
    const tail = foldEvents(
      log.slice(7).map((event, i) => ({ seq: 100 + i, event })),
      { from: head, trace: true },
    );
    expect(persisted(tail.snapshot)).toEqual(persisted(foldEvents(log).snapshot));
    expect(persisted(tail.snapshot)).toEqual(persisted(byTransition(log.slice(7), head).snapshot));
    expect(tail.steps[0]).toMatchObject({ seq: 100, eventId: 7 });
    // Restoring into `thinking` does not begin the step again: the iteration is counted once.
    expect(foldEvents([], { from: head }).snapshot.context.iterations).toBe(head.context.iterations);
  });

  it('refuses a log that does not start with its creation, and an empty one', () => {
    expect(() => foldEvents(log.slice(1))).toThrow(/starts with conversation_created, not runtime_status/);
    expect(() => foldEvents([])).toThrow(/empty log/);
  });
});
