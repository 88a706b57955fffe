import { describe, expect, it } from 'vitest';
import { initialTransition, transition } from 'xstate';
import {
  decide,
  initialSnapshot,
  nextSnapshot,
  sessionMachine,
  type DecisionInput,
  type SessionEvent,
  type SessionInput,
  type SessionSnapshot,
} from '../../machines/index.ts';

const input: SessionInput = {
  conversationId: 'c1',
  user: 'u',
  maxIterations: 10,
  maxBudget: null,
  maxRateLimitRetries: 5,
  maxAttempts: null,
  doubleTexting: 'enqueue',
  confirmationMode: false,
  startDeadline: null,
};

const persisted = (snapshot: SessionSnapshot) => sessionMachine.getPersistedSnapshot(snapshot);

/** A chat: the runtime comes up, then a user message and the agent's answer, `rounds` times. */
function chat(rounds: number): SessionEvent[] {
  const events: SessionEvent[] = [{ type: 'runtime.connected', eventId: 1, at: 1 }];
  for (let i = 0; i < rounds; i++) {
    const id = 2 + 2 * i;
    events.push({ type: 'user.message', eventId: id, at: id });
    events.push({ type: 'agent.message', eventId: id + 1, at: id + 1, cause: id });
  }
  return events;
}

describe('the stepper (machines/step.ts)', () => {
  it('steps as xstate transition() does, from a new conversation and from a snapshot it already stepped past', () => {
    const events = chat(3);
    const stepped = [initialSnapshot(input)];
    const expected = [initialTransition(sessionMachine, input)[0]];
    for (const event of events) {
      stepped.push(nextSnapshot(stepped.at(-1)!, event));
      expected.push(transition(sessionMachine, expected.at(-1)!, event)[0]);
    }
    expect(stepped.map(persisted)).toEqual(expected.map(persisted));
    expect(stepped.at(-1)!.value).toEqual({ active: 'awaiting_user_input' });
    // Back to a snapshot whose actor moved on: another event from there, as transition() takes it.
    const stop: SessionEvent = { type: 'user.change_state', eventId: 9, at: 9, state: 'stopped' };
    const branch = nextSnapshot(stepped[2]!, stop);
    expect(persisted(branch)).toEqual(persisted(transition(sessionMachine, expected[2]!, stop)[0]));
    expect(branch.value).toEqual({ active: 'stopped' });
    // The lineage that moved on is untouched, and goes on from its last snapshot.
    expect(persisted(nextSnapshot(stepped.at(-1)!, stop))).toEqual(
      persisted(transition(sessionMachine, expected.at(-1)!, stop)[0]),
    );
  });

  it('keeps decide pure: the same snapshot and input give an equal decision, whatever was decided since', () => {
    const stamp = (nextEventId: number) => ({ conversationId: 'c1', nextEventId, now: new Date(Date.UTC(2026, 0, 1)) });
    const created = decide(undefined, { type: 'create', conversationId: 'c1', data: createdData }, stamp(0));
    if (!created.ok) throw new Error(created.reason);
    const up = decide(created.snapshot, { type: 'runtime_progress', status: 'connected' }, stamp(1));
    if (!up.ok) throw new Error(up.reason);
    const message: DecisionInput = { type: 'user_action', action: { type: 'message', content: 'hi' } };
    const first = decide(up.snapshot, message, stamp(3));
    if (!first.ok) throw new Error(first.reason);
    const answer: DecisionInput = { type: 'agent_answered', cause: 3, answer: { type: 'message', content: 'hello' } };
    const answered = decide(first.snapshot, answer, stamp(5));
    const stop: DecisionInput = { type: 'user_action', action: { type: 'change_agent_state', state: 'stopped' } };
    const stopped = decide(up.snapshot, stop, stamp(3));
    // Again, from snapshots that later decisions stepped past.
    const again = decide(up.snapshot, message, stamp(3));
    const answeredAgain = decide(first.snapshot, answer, stamp(5));
    expect(again).toMatchObject({ ok: true, events: first.events });
    expect(again.ok && persisted(again.snapshot)).toEqual(persisted(first.snapshot));
    expect(answeredAgain).toMatchObject({ ok: true, events: answered.ok ? answered.events : [] });
    expect(answeredAgain.ok && persisted(answeredAgain.snapshot)).toEqual(answered.ok && persisted(answered.snapshot));
    expect(answered.ok && answered.snapshot.value).toEqual({ active: 'awaiting_user_input' });
    expect(stopped.ok && stopped.snapshot.value).toEqual({ active: 'stopped' });
    expect(decide(up.snapshot, stop, stamp(3))).toMatchObject({ ok: true, events: stopped.ok ? stopped.events : [] });
  });

  it('throws what the machine throws, every time, and steps on from a snapshot that fits', () => {
    const thinking = chat(1)
      .slice(0, 2)
      .reduce((snapshot, event) => nextSnapshot(snapshot, event), initialSnapshot(input));
    expect(thinking.value).toEqual({ active: { running: 'thinking' } });
    // A context that does not fit the machine: the limit's message reads `spent`, here null.
    const broken = sessionMachine.resolveState({
      value: thinking.value,
      context: { ...thinking.context, maxBudget: 0, spent: null as unknown as number },
    });
    const answer: SessionEvent = { type: 'agent.message', eventId: 3, at: 3, cause: 2, goesOn: true };
    expect(() => transition(sessionMachine, broken, answer)).toThrow(TypeError);
    expect(() => nextSnapshot(broken, answer)).toThrow(TypeError);
    expect(() => nextSnapshot(broken, answer)).toThrow(TypeError);
    expect(nextSnapshot(thinking, answer).value).toEqual({ active: { running: 'thinking' } });
  });
});

const createdData = {
  user: 'u',
  confirmation_mode: false,
  max_iterations: 10,
  secret_names: [],
  replay: false,
};
