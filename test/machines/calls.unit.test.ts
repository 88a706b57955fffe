import { describe, expect, it } from 'vitest';
import { effectsOf, foldEvents, needsConfirmation, upcasterFor, type AnswerCall } from '../../machines/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { logViolations } from '../properties/logChecks.ts';
import { DecidedConversation } from './deciderConversation.ts';

/*
 * The calls of one reply (issue 26): stored together, run one after another,
 * each answered, also when a rejection, an interrupt, a stop, a passivation or
 * a lost runtime cuts the reply. Pure: no I/O.
 */

const run = (command: string, callId: string, high = false): AnswerCall => ({
  command,
  callId,
  risk: 'low',
  securityRisk: high ? 'HIGH' : 'LOW',
});
const read = (path: string, callId: string): AnswerCall => ({
  tool: 'read_file',
  arguments: { path },
  callId,
  risk: 'low',
});

/** A conversation whose agent answered its first step with `calls`. */
function replied(calls: AnswerCall[], confirmationMode = false): DecidedConversation {
  const c = new DecidedConversation({ confirmation_mode: confirmationMode, max_attempts: 3 });
  c.decide({ type: 'runtime_progress', status: 'connected' });
  c.decide({ type: 'user_action', action: { type: 'message', content: 'go' } });
  const cause = c.snapshot.context.stepCause!;
  c.decide({ type: 'agent_answered', cause, answer: { type: 'calls', calls, thought: 'Two things.' } });
  return c;
}

/** The result events of the log, as `[type, cause, call_id, output start]`. */
function results(events: StoredEvent[]): Array<[string, number | undefined, string | undefined, string]> {
  return events.flatMap((e) =>
    e.type === 'command_output' || e.type === 'tool_result'
      ? [
          [e.type, e.cause, e.data.call_id, e.data.output.split(':')[0]!] as [
            string,
            number | undefined,
            string,
            string,
          ],
        ]
      : [],
  );
}

const callEvents = (c: DecidedConversation) => c.events.filter((e) => e.type === 'command' || e.type === 'tool_call');

function expectFoldsAsLive(c: DecidedConversation): void {
  const fold = foldEvents(c.events).snapshot;
  expect(fold?.value).toEqual(c.snapshot.value);
  expect(fold?.context).toEqual(c.snapshot.context);
  expect(logViolations(c.events), JSON.stringify(c.events.map((e) => [e.id, e.type, e.cause]))).toEqual([]);
}

describe('the calls of one reply', () => {
  it('stores every call of the reply at once, with its id and ratings, the thought on the first only', () => {
    const c = replied([run('ls', 'a'), read('x.txt', 'b')]);
    const [first, second] = callEvents(c);
    expect(first).toMatchObject({
      type: 'command',
      data: { command: 'ls', call_id: 'a', risk: 'low', security_risk: 'LOW', needs_confirmation: false },
    });
    expect(first!.data).toHaveProperty('thought', 'Two things.');
    expect(second).toMatchObject({ type: 'tool_call', data: { call_id: 'b', tool: 'read_file' } });
    expect(second!.data).not.toHaveProperty('thought');
    expect(second!.cause).toBe(first!.cause);
    expect(c.snapshot.context.queuedCalls.map((q) => q.eventId)).toEqual([second!.id]);
    expect(effectsOf(c.snapshot)).toEqual([{ type: 'run_command', cause: first!.id, command: 'ls' }]);
    expectFoldsAsLive(c);
  });

  it('runs the next call once the one before has its result, then asks the agent again', () => {
    const c = replied([run('ls', 'a'), read('x.txt', 'b')]);
    const [first, second] = callEvents(c);
    const result = { exit_code: 0, output: 'x.txt\n', timed_out: false, truncated: false };
    c.decide({ type: 'command_finished', cause: first!.id, command: 'ls', result });
    expect(c.events.at(-1)).toMatchObject({ type: 'command_output', data: { call_id: 'a' } });
    expect(effectsOf(c.snapshot)).toEqual([
      { type: 'call_tool', cause: second!.id, callId: 'b', tool: 'read_file', arguments: { path: 'x.txt' } },
    ]);
    expect(c.state).toBe('running');
    c.decide({
      type: 'tool_finished',
      cause: second!.id,
      callId: 'b',
      tool: 'read_file',
      output: 'hi',
      isError: false,
    });
    expect(c.snapshot.matches({ active: { running: 'thinking' } })).toBe(true);
    expect(c.snapshot.context.stepCause).toBe(c.events.at(-1)!.id);
    expectFoldsAsLive(c);
  });

  it('waits for confirmation before a later call that needs it, and answers every call a rejection leaves', () => {
    const c = replied([run('ls', 'a'), run('rm -rf build', 'b', true), read('y', 'c')], true);
    const [first, second, third] = callEvents(c);
    expect(c.state).toBe('running');
    const result = { exit_code: 0, output: '', timed_out: false, truncated: false };
    c.decide({ type: 'command_finished', cause: first!.id, command: 'ls', result });
    expect(c.state).toBe('awaiting_user_confirmation');
    expect(c.snapshot.context.pendingCommand?.eventId).toBe(second!.id);
    c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'user_rejected' } });
    expect(c.state).toBe('rejected');
    expect(results(c.events)).toEqual([
      ['command_output', first!.id, 'a', ''],
      ['command_output', second!.id, 'b', 'not run'],
      ['tool_result', third!.id, 'c', 'not run'],
    ]);
    expect(c.snapshot.context.pendingCommand).toBeNull();
    expect(c.snapshot.context.queuedCalls).toEqual([]);
    expectFoldsAsLive(c);
  });

  it('answers the running call and the queued ones when the user interrupts', () => {
    const c = replied([run('sleep 9', 'a'), read('x', 'b'), run('ls', 'c')]);
    const [first, second, third] = callEvents(c);
    c.decide({ type: 'user_action', action: { type: 'interrupt' } });
    expect(c.state).toBe('awaiting_user_input');
    expect(results(c.events)).toEqual([
      ['command_output', first!.id, 'a', 'cancelled'],
      ['tool_result', second!.id, 'b', 'not run'],
      ['command_output', third!.id, 'c', 'not run'],
    ]);
    expect(c.events.find((e) => e.type === 'tool_result')?.data).toMatchObject({ is_error: true });
    expect(effectsOf(c.snapshot)).toEqual([]);
    expectFoldsAsLive(c);
  });

  it('answers the queued calls and reports the running one interrupted when the session leaves memory', () => {
    const c = replied([run('sleep 9', 'a'), read('x', 'b')]);
    const [first, second] = callEvents(c);
    c.decide({ type: 'passivate', reason: 'idle' });
    expect(c.snapshot.matches('passivated')).toBe(true);
    expect(results(c.events)).toEqual([
      ['tool_result', second!.id, 'b', 'not run'],
      ['command_output', first!.id, 'a', 'interrupted'],
    ]);
    expectFoldsAsLive(c);
  });

  it('answers the queued calls when the runtime is lost under the running one', () => {
    const c = replied([run('sleep 9', 'a'), read('x', 'b')]);
    const [first, second] = callEvents(c);
    c.decide({ type: 'runtime_lost', message: 'the runtime exited (signal SIGKILL)' });
    expect(c.state).toBe('error');
    expect(results(c.events)).toEqual([['tool_result', second!.id, 'b', 'not run']]);
    c.decide({ type: 'command_unavailable', cause: first!.id, command: 'sleep 9', why: 'the runtime exited' });
    expect(results(c.events).at(-1)?.slice(0, 3)).toEqual(['command_output', first!.id, 'a']);
    expect(c.snapshot.context.pendingCommand).toBeNull();
    expectFoldsAsLive(c);
  });

  it('answers a call that waits for confirmation, and the calls after it, when the runtime is lost', () => {
    const c = replied([run('rm -rf b', 'a', true), read('x', 'b')], true);
    const [first, second] = callEvents(c);
    expect(c.state).toBe('awaiting_user_confirmation');
    c.decide({ type: 'runtime_lost', message: 'the runtime exited (signal SIGKILL)' });
    expect(c.state).toBe('error');
    expect(results(c.events).map((r) => r.slice(0, 3))).toEqual([
      ['command_output', first!.id, 'a'],
      ['tool_result', second!.id, 'b'],
    ]);
    expect(c.snapshot.context.pendingCommand).toBeNull();
    expect(c.snapshot.context.queuedCalls).toEqual([]);
    expectFoldsAsLive(c);
  });

  it('answers a tool call out when the runtime is lost (its effect is cut, so nothing else would)', () => {
    const c = replied([read('x', 'a')]);
    const [call] = callEvents(c);
    c.decide({ type: 'runtime_lost', message: 'the runtime exited (signal SIGKILL)' });
    expect(results(c.events).map((r) => r.slice(0, 3))).toEqual([['tool_result', call!.id, 'a']]);
    expect(effectsOf(c.snapshot)).toEqual([]);
    expectFoldsAsLive(c);
  });

  it('holds the next call when a pause was asked, and runs it on resume', () => {
    const c = replied([run('ls', 'a'), read('x', 'b')]);
    const [first, second] = callEvents(c);
    c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'paused' } });
    const result = { exit_code: 0, output: '', timed_out: false, truncated: false };
    c.decide({ type: 'command_finished', cause: first!.id, command: 'ls', result });
    expect(c.state).toBe('paused');
    expect(c.snapshot.context.pendingCommand).toMatchObject({ eventId: second!.id, held: true });
    c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'running' } });
    expect(effectsOf(c.snapshot)).toEqual([
      { type: 'call_tool', cause: second!.id, callId: 'b', tool: 'read_file', arguments: { path: 'x' } },
    ]);
    expectFoldsAsLive(c);
  });

  it("refuses a stale attempt's calls: the reply's later calls must name the same step and attempt", () => {
    const c = replied([run('ls', 'a')]);
    const stale = { type: 'calls' as const, calls: [run('pwd', 'z')] };
    const decision = c.tryDecide({ type: 'agent_answered', cause: callEvents(c)[0]!.cause!, answer: stale });
    expect(decision.ok).toBe(false);
  });
});

describe('needs_confirmation, decided as a call is stored', () => {
  const cases: Array<[string, Pick<AnswerCall, 'risk' | 'securityRisk'>, boolean, boolean]> = [
    ['the model says HIGH on a harmless call', { risk: 'low', securityRisk: 'HIGH' }, true, true],
    ['the model says LOW on what the rules rate high', { risk: 'high', securityRisk: 'LOW' }, true, true],
    ['both low', { risk: 'low', securityRisk: 'LOW' }, true, false],
    ['MEDIUM', { risk: 'low', securityRisk: 'MEDIUM' }, true, false],
    ['unrated, TETHER_CONFIRM_UNKNOWN=true', { risk: 'low', securityRisk: 'UNKNOWN' }, true, true],
    ['unrated, TETHER_CONFIRM_UNKNOWN=false', { risk: 'low', securityRisk: 'UNKNOWN' }, false, false],
    ['unrated but rules high, TETHER_CONFIRM_UNKNOWN=false', { risk: 'high', securityRisk: 'UNKNOWN' }, false, true],
    ['a call that does not act', { risk: 'low' }, true, false],
  ];
  it.each(cases)('%s', (_name, call, confirmUnknown, waits) => {
    expect(needsConfirmation(call, confirmUnknown)).toBe(waits);
  });

  it('is stored with the call, so a fold never reads the setting', () => {
    const c = new DecidedConversation({ confirmation_mode: true });
    c.decide({ type: 'runtime_progress', status: 'connected' });
    c.decide({ type: 'user_action', action: { type: 'message', content: 'go' } });
    const unrated: AnswerCall = { command: 'ls', callId: 'a', risk: 'low', securityRisk: 'UNKNOWN' };
    const answer = { type: 'calls' as const, calls: [unrated] };
    c.decide({ type: 'agent_answered', cause: c.snapshot.context.stepCause!, answer, confirmUnknown: true });
    expect(callEvents(c)[0]?.data).toMatchObject({ security_risk: 'UNKNOWN', needs_confirmation: true });
    expect(c.state).toBe('awaiting_user_confirmation');
    expect(foldEvents(c.events).snapshot?.value).toEqual(c.snapshot.value);
  });
});

describe('a failed clone', () => {
  it('answers the command that waits for the new runtime, so nothing stays out', () => {
    const c = new DecidedConversation({ repository: { url: 'https://example.com/r.git' } });
    c.decide({ type: 'clone_failed', message: 'no such branch' });
    expect(c.state).toBe('error');
    c.decide({ type: 'user_action', action: { type: 'reconnect_runtime' } });
    const [run] = c.decide({ type: 'user_action', action: { type: 'run', command: 'ls' } });
    expect(c.snapshot.context.pendingCommand?.eventId).toBe(run!.id);
    c.decide({ type: 'clone_failed', message: 'no such branch' });
    expect(c.events.at(-1)).toMatchObject({ type: 'command_output', cause: run!.id, data: { exit_code: null } });
    expect(c.snapshot.context.pendingCommand).toBeNull();
    expect(c.state).toBe('error');
    expectFoldsAsLive(c);
  });
});

describe('needs_confirmation of logs before version 10', () => {
  it("reads an agent command's rules rating as whether it waits (the upcaster of version 9)", () => {
    const upcast = upcasterFor(9)!;
    const command = (risk: 'low' | 'high') =>
      ({
        v: 1,
        id: 3,
        conversation_id: 'c1',
        ts: '2026-01-01T00:00:00.000Z',
        source: 'agent',
        type: 'command',
        cause: 2,
        data: { command: 'x', risk },
      }) as StoredEvent;
    expect(upcast(command('high')).data).toMatchObject({ needs_confirmation: true });
    expect(upcast(command('low')).data).toMatchObject({ needs_confirmation: false });
    const user = { ...command('high'), source: 'user' } as StoredEvent;
    expect(upcast(user).data).not.toHaveProperty('needs_confirmation');
  });
});
