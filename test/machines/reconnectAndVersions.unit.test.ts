import { describe, expect, it } from 'vitest';
import { initialTransition, transition } from 'xstate';
import {
  agentStateOf,
  effectsOf,
  sessionMachine,
  type SessionEvent,
  type SessionInput,
  type SessionSnapshot,
} from '../../machines/index.ts';

const input: SessionInput = {
  conversationId: 'c1',
  user: 'u',
  maxIterations: 10,
  maxBudget: null,
  maxRateLimitRetries: 2,
  maxAttempts: null,
  doubleTexting: 'enqueue',
  confirmationMode: true,
  startDeadline: null,
};

function run(events: SessionEvent[], start?: SessionSnapshot, given: SessionInput = input): SessionSnapshot {
  let snapshot = start ?? initialTransition(sessionMachine, given)[0];
  for (const event of events) {
    expect(snapshot.can(event), `${event.type} is accepted in ${JSON.stringify(snapshot.value)}`).toBe(true);
    [snapshot] = transition(sessionMachine, snapshot, event);
  }
  return snapshot;
}

const types = (snapshot: SessionSnapshot) => effectsOf(snapshot).map((e) => e.type);
const lost: SessionEvent = { type: 'runtime.disconnected', eventId: 2, reason: 'the runtime exited (signal SIGKILL)' };

describe('reconnecting a lost runtime', () => {
  it('keeps a command sent to the lost runtime failed when a reconnect comes before its report', () => {
    const sent = run([
      { type: 'runtime.connected', eventId: 1 },
      lost,
      { type: 'user.run', eventId: 3, command: 'ls' },
    ]);
    expect(effectsOf(sent)).toEqual([{ type: 'fail_command', cause: 3, command: 'ls', why: lost.reason }]);
    const reconnected = run([{ type: 'user.reconnect_runtime', eventId: 4 }], sent);
    expect(reconnected.context.runtimeLost).toBeNull();
    expect(types(reconnected)).toEqual(['start_runtime', 'fail_command']);
    expect(types(reconnected)).not.toContain('run_command');
  });

  it('runs a risky command confirmed after a reconnect in the new runtime (it was never sent to the lost one)', () => {
    const waiting = run([
      { type: 'runtime.connected', eventId: 1 },
      lost,
      { type: 'user.message', eventId: 3 },
      { type: 'agent.run', eventId: 4, cause: 3, command: 'rm -rf build', needsConfirmation: true },
    ]);
    expect(agentStateOf(waiting)).toBe('awaiting_user_confirmation');
    const confirmed = run(
      [
        { type: 'user.reconnect_runtime', eventId: 5 },
        { type: 'runtime.connected', eventId: 6 },
        { type: 'user.change_state', eventId: 7, state: 'user_confirmed' },
      ],
      waiting,
    );
    expect(effectsOf(confirmed)).toEqual([{ type: 'run_command', cause: 4, command: 'rm -rf build' }]);
  });

  it('refuses a second reconnect while the first one brings a runtime up, in error too', () => {
    const failed = run([
      { type: 'runtime.connected', eventId: 1 },
      { type: 'user.message', eventId: 2 },
      { type: 'agent.failed', eventId: 3, cause: 2, reason: 'boom' },
    ]);
    expect(agentStateOf(failed)).toBe('error');
    const once = run([{ type: 'user.reconnect_runtime', eventId: 4 }], failed);
    expect(once.can({ type: 'user.reconnect_runtime', eventId: 5 })).toBe(false);
    const up = run([{ type: 'runtime.connected', eventId: 5 }], once);
    expect(agentStateOf(up)).toBe('awaiting_user_input');
  });
});

describe('the running spell and a crash', () => {
  it('keeps running-since across a passivation, so a session coming back running is not one more running', () => {
    const running = run([
      { type: 'runtime.connected', eventId: 1, at: 1_000 },
      { type: 'user.message', eventId: 2, at: 2_000 },
    ]);
    expect(running.context.runningSince).toBe(2_000);
    const back = run(
      [
        { type: 'session.passivate', eventId: 3, at: 3_000, reason: 'shutdown' },
        { type: 'session.rehydrate', eventId: 4, at: 9_000 },
      ],
      running,
    );
    expect(agentStateOf(back)).toBe('running');
    expect(back.context.runningSince).toBe(2_000);
    const answered = run([{ type: 'agent.message', eventId: 5, cause: 2 }], back);
    expect(answered.context.runningSince).toBeNull();
  });

  it('forgets a connected runtime after a crash (it died with the process), but not one coming up or lost', () => {
    const up = run([{ type: 'runtime.connected', eventId: 1 }]);
    expect(run([{ type: 'session.rehydrate', eventId: 2 }], up).context.runtime).toBe('stopped');
    const dead = run([lost], up);
    expect(run([{ type: 'session.rehydrate', eventId: 3 }], dead).context.runtime).toBe('disconnected');
  });
});

describe('a log written under machine version 3', () => {
  const stoppedThenRun: SessionEvent[] = [
    { type: 'runtime.connected', eventId: 1 },
    { type: 'user.message', eventId: 2 },
    { type: 'agent.run', eventId: 3, cause: 2, command: 'sleep 9', needsConfirmation: false },
    { type: 'user.change_state', eventId: 4, state: 'stopped' },
    { type: 'user.run', eventId: 5, command: 'echo p2' },
  ];

  it('takes an older command output in executing as its command, as version 3 did', () => {
    const v3 = run(stoppedThenRun, undefined, { ...input, machineVersion: 3 });
    const after = run([{ type: 'command.finished', eventId: 6, cause: 3 }], v3);
    expect(agentStateOf(after)).toBe('awaiting_user_input');
    expect(after.context.pendingCommand).toBeNull();
  });

  it('under version 4 records that older output and keeps waiting for its own command', () => {
    const v4 = run(stoppedThenRun);
    const after = run([{ type: 'command.finished', eventId: 6, cause: 3 }], v4);
    expect(agentStateOf(after)).toBe('running');
    expect(after.context.pendingCommand).toMatchObject({ eventId: 5 });
    expect(agentStateOf(run([{ type: 'command.finished', eventId: 7, cause: 5 }], after))).toBe('awaiting_user_input');
  });
});
