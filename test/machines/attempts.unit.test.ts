import { describe, expect, it } from 'vitest';
import { effectsOf, foldEvents } from '../../machines/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { DecidedConversation } from './deciderConversation.ts';

/** A conversation on a connected runtime, with the attempt bound it records (none: a version 6 log). */
class Conversation extends DecidedConversation {
  constructor(maxAttempts: number | undefined, maxRateLimitRetries = 5) {
    super({
      max_rate_limit_retries: maxRateLimitRetries,
      ...(maxAttempts !== undefined && { max_attempts: maxAttempts }),
    });
    this.decide({ type: 'runtime_progress', status: 'connected' });
  }

  /** A user message; returns the step it starts (its cause, the item of its deltas). */
  message(content = 'hello'): number {
    this.decide({ type: 'user_action', action: { type: 'message', content } });
    return this.context.stepCause!;
  }

  get context() {
    return this.snapshot.context;
  }

  get asked() {
    return effectsOf(this.snapshot).filter((e) => e.type === 'ask_agent');
  }

  serverError(cause: number, attempt: number): StoredEvent[] {
    return this.decide({
      type: 'agent_retry',
      cause,
      attempt,
      reason: 'server_error',
      code: 'LLM_SERVER_ERROR',
      message: 'HTTP 503',
    });
  }

  answer(cause: number, attempt: number, deltas = 0) {
    return this.tryDecide({
      type: 'agent_answered',
      cause,
      attempt,
      deltas,
      answer: { type: 'message', content: 'hi there' },
    });
  }

  rateLimited(cause: number) {
    const retryAt = new Date(Date.UTC(2026, 0, 1) + 1).toISOString();
    return this.decide({ type: 'agent_failed', cause, code: 'LLM_RATE_LIMITED', message: 'slow down', retryAt });
  }
}

const types = (events: StoredEvent[]) => events.map((e) => e.type);

describe('attempts of an agent step (decider and machine)', () => {
  it('tries a failing server again as the next attempt of the same item, stored before it runs, not as another iteration', () => {
    const c = new Conversation(3);
    const item = c.message();
    expect(c.asked).toEqual([{ type: 'ask_agent', cause: item, attempt: 1 }]);
    const iterations = c.context.iterations;
    const retried = c.serverError(item, 1);
    expect(retried).toMatchObject([
      { type: 'agent_attempt', cause: item, data: { item_id: String(item), attempt: 2, reason: 'server_error' } },
    ]);
    expect(c.asked).toEqual([{ type: 'ask_agent', cause: item, attempt: 2 }]);
    expect(c.context.iterations).toBe(iterations);
    // The first attempt's late answer is refused; the second's is stored with its item, attempt and deltas.
    expect(c.answer(item, 1)).toMatchObject({ ok: false, code: 'ILLEGAL_TRANSITION' });
    const answered = c.answer(item, 2, 7);
    expect(answered.ok && answered.events[0]).toMatchObject({
      type: 'message',
      cause: item,
      data: { content: 'hi there', item_id: String(item), attempt: 2, deltas: 7 },
    });
    expect(c.state).toBe('awaiting_user_input');
    // A retry that names an attempt that is over is refused, and stores nothing.
    expect(
      c.tryDecide({ type: 'agent_retry', cause: item, attempt: 2, reason: 'network', code: 'X', message: 'x' }),
    ).toMatchObject({ ok: false });
  });

  it('makes the answer after a rate limit before the first token attempt 2 of the same item, without another iteration', () => {
    const c = new Conversation(3);
    const item = c.message();
    const iterations = c.context.iterations;
    c.rateLimited(item);
    expect(c.state).toBe('rate_limited');
    expect(c.asked).toEqual([]);
    const back = c.decide({ type: 'deadline', name: 'retry' });
    expect(types(back)).toEqual(['timeout', 'agent_state_changed', 'agent_attempt']);
    expect(back[2]).toMatchObject({ data: { item_id: String(item), attempt: 2, reason: 'rate_limited' } });
    expect(c.asked).toEqual([{ type: 'ask_agent', cause: item, attempt: 2 }]);
    expect(c.context.iterations).toBe(iterations);
    expect(c.answer(item, 2)).toMatchObject({ ok: true });
    expect(c.state).toBe('awaiting_user_input');
  });

  it('goes to error with a reason that says why once the bound is reached (failing server, then rate limit)', () => {
    const c = new Conversation(2);
    const item = c.message();
    c.serverError(item, 1);
    const failed = c.serverError(item, 2);
    expect(types(failed)).toEqual(['agent_error', 'agent_state_changed']);
    expect(failed[1]).toMatchObject({ data: { state: 'error' } });
    const reason = c.context.error!;
    expect(reason).toMatch(/gave up after 2 attempts \(at most 2\): HTTP 503/);
    expect(failed[1]!.type === 'agent_state_changed' && failed[1].data.reason).toBe(reason);

    const d = new Conversation(2);
    const step = d.message();
    d.serverError(step, 1);
    const limited = d.rateLimited(step);
    expect(types(limited)).toEqual(['agent_error', 'agent_state_changed']);
    expect(d.state).toBe('error');
    expect(d.context.error).toMatch(/gave up after 2 attempts \(at most 2\): rate limited \(slow down\)/);
  });

  it('asks a step cut by a passivation again as an attempt that does not count, and one cut by a crash too', () => {
    const c = new Conversation(1);
    const item = c.message();
    c.decide({ type: 'passivate', reason: 'too_many_running' });
    const back = c.decide({ type: 'rehydrate', from: 'snapshot', folded: 0 });
    expect(back.find((e) => e.type === 'agent_attempt')).toMatchObject({
      data: { item_id: String(item), attempt: 2, reason: 'resumed' },
    });
    // Its owner died (no passivation): the next attempt again, still within a bound of 1.
    const crashed = c.decide({ type: 'rehydrate', from: 'log', folded: c.events.length });
    expect(crashed.find((e) => e.type === 'agent_attempt')).toMatchObject({
      data: { attempt: 3, reason: 'owner_lost' },
    });
    expect(c.asked).toEqual([{ type: 'ask_agent', cause: item, attempt: 3 }]);
    expect(c.answer(item, 3)).toMatchObject({ ok: true });
    // The fold of the log comes to the same place as the decisions did.
    expect(foldEvents(c.events).snapshot.context).toEqual(c.context);
  });

  it('asks the step again in a fork cut between an attempt and its answer', () => {
    const c = new Conversation(3);
    const item = c.message();
    c.serverError(item, 1);
    // The fork's copied events end with the attempt; its first decision is `fork`.
    const fork = new Conversation(3);
    fork.events = c.events.map((e) => ({ ...e, conversation_id: 'c1' }));
    fork.snapshot = foldEvents(fork.events).snapshot;
    const first = fork.decide({ type: 'fork', parent: 'p', seq: fork.events.length, folded: fork.events.length });
    expect(first.find((e) => e.type === 'agent_attempt')).toMatchObject({
      data: { item_id: String(item), attempt: 3, reason: 'forked' },
    });
    expect(fork.asked).toEqual([{ type: 'ask_agent', cause: item, attempt: 3 }]);
  });

  it('keeps a log without a recorded bound as it was: a rate-limited step comes back as a new step, one more iteration', () => {
    const c = new Conversation(undefined);
    const item = c.message();
    const iterations = c.context.iterations;
    c.rateLimited(item);
    const back = c.decide({ type: 'deadline', name: 'retry' });
    expect(types(back)).not.toContain('agent_attempt');
    const [asked] = c.asked;
    expect(asked).toMatchObject({ attempt: 1 });
    expect(asked!.cause).not.toBe(item);
    expect(c.context.iterations).toBe(iterations + 1);
  });
});
