import { describe, expect, it } from 'vitest';
import { initialTransition, transition } from 'xstate';
import {
  agentStateOf,
  BUSY_AGENT_STATES,
  effectsOf,
  isBusy,
  sessionMachine,
  type SessionEvent,
  type SessionSnapshot,
} from '../../machines/index.ts';

const input = {
  conversationId: 'c1',
  user: 'u',
  maxIterations: 3,
  maxBudget: null,
  maxRateLimitRetries: 2,
  maxAttempts: null,
  doubleTexting: 'enqueue' as const,
  confirmationMode: false,
  startDeadline: null,
};

function run(events: SessionEvent[], start?: SessionSnapshot): SessionSnapshot {
  let snapshot = start ?? initialTransition(sessionMachine, input)[0];
  for (const event of events) [snapshot] = transition(sessionMachine, snapshot, event);
  return snapshot;
}

const connected: SessionEvent = { type: 'runtime.connected', eventId: 1 };

describe('session machine as pure functions', () => {
  it('starts in loading and asks the host to start the runtime', () => {
    const [snapshot] = initialTransition(sessionMachine, input);
    expect(snapshot.value).toEqual({ starting: 'creating' });
    expect(agentStateOf(snapshot)).toBe('loading');
    // Cause 0: the runtime the creation record asks for.
    expect(effectsOf(snapshot)).toEqual([{ type: 'start_runtime', cause: 0 }]);
  });

  it('waits for the user once the runtime connects without an initial message', () => {
    const snapshot = run([connected]);
    expect(agentStateOf(snapshot)).toBe('awaiting_user_input');
  });

  it('runs the agent on connect when a message arrived while starting', () => {
    let snapshot = run([{ type: 'user.message', eventId: 1 }]);
    expect(agentStateOf(snapshot)).toBe('loading');
    snapshot = run([{ type: 'runtime.connected', eventId: 2 }], snapshot);
    expect(snapshot.context.deadline).toBeNull();
    expect(agentStateOf(snapshot)).toBe('running');
    // The step answers the message that waited, not the runtime event that let it start.
    expect(snapshot.context.stepCause).toBe(1);
    expect(effectsOf(snapshot)).toEqual([{ type: 'ask_agent', cause: 1, attempt: 1 }]);
  });

  it('goes running on a user message and back to awaiting on the answer to that step', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    expect(agentStateOf(running)).toBe('running');
    expect(effectsOf(running)).toContainEqual({ type: 'ask_agent', cause: 2, attempt: 1 });
    const answered = run([{ type: 'agent.message', eventId: 3, cause: 2 }], running);
    expect(agentStateOf(answered)).toBe('awaiting_user_input');
    expect(effectsOf(answered)).toEqual([]);
  });

  it('takes another step when the agent says it goes on, caused by that message, within the iteration limit', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    const again = run([{ type: 'agent.message', eventId: 3, cause: 2, goesOn: true }], running);
    expect(agentStateOf(again)).toBe('running');
    expect(again.context.stepCause).toBe(3);
    // A new step: asked again under a new cause, so the host asks once more.
    expect(effectsOf(again)).toEqual([{ type: 'ask_agent', cause: 3, attempt: 1 }]);
    const third = run([{ type: 'agent.message', eventId: 4, cause: 3, goesOn: true }], again);
    expect(third.context.iterations).toBe(3);
    // input.maxIterations is 3: a fourth step would pass the limit.
    const limited = run([{ type: 'agent.message', eventId: 5, cause: 4, goesOn: true }], third);
    expect(agentStateOf(limited)).toBe('error');
    expect(limited.context.error).toMatch(/limit of 3 iterations/);
    const waits = run([{ type: 'agent.message', eventId: 5, cause: 4 }], third);
    expect(agentStateOf(waits)).toBe('awaiting_user_input');
  });

  it('refuses an agent answer that belongs to an abandoned step', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    const stale = { type: 'agent.message', eventId: 3, cause: 99 } as const;
    expect(running.can(stale)).toBe(false);
    expect(running.can({ ...stale, cause: 2 })).toBe(true);
  });

  it('runs an agent command, then asks the agent again with the observation', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    const executing = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'ls', needsConfirmation: false }],
      running,
    );
    expect(effectsOf(executing)).toEqual([{ type: 'run_command', cause: 3, command: 'ls' }]);
    expect(executing.context.pendingCommand).toEqual({ eventId: 3, source: 'agent', command: 'ls', step: 2 });
    const after = run([{ type: 'command.finished', eventId: 4, cause: 3 }], executing);
    expect(agentStateOf(after)).toBe('running');
    expect(effectsOf(after)).toEqual([{ type: 'ask_agent', cause: 4, attempt: 1 }]);
    expect(after.context.pendingCommand).toBeNull();
    expect(after.context.stepCause).toBe(4);
  });

  it('returns to awaiting after a user command without asking the agent', () => {
    const executing = run([connected, { type: 'user.run', eventId: 2, command: 'pwd' }]);
    expect(effectsOf(executing)).toEqual([{ type: 'run_command', cause: 2, command: 'pwd' }]);
    const after = run([{ type: 'command.finished', eventId: 3, cause: 2 }], executing);
    expect(agentStateOf(after)).toBe('awaiting_user_input');
    expect(effectsOf(after)).toEqual([]);
  });

  // Found by a fresh property-test seed (passivation equivalence, seed 5): the output was refused,
  // and the stale pending command made a passivated run differ from the uninterrupted one.
  it('records the output of a stopped command that finishes while a new message keeps the agent busy, in any state', () => {
    const stopped = run([
      connected,
      { type: 'user.run', eventId: 2, command: 'sleep 1' },
      { type: 'user.change_state', eventId: 3, state: 'stopped' },
    ]);
    expect(stopped.context.pendingCommand).toMatchObject({ eventId: 2 });
    const thinking = run([{ type: 'user.message', eventId: 4 }], stopped);
    expect(thinking.value).toEqual({ active: { running: 'thinking' } });
    const output = { type: 'command.finished', eventId: 5, cause: 2 } as const;
    for (const [busy, asks] of [
      // Still the step the message started: the same ask, nothing new.
      [thinking, [{ type: 'ask_agent', cause: 4, attempt: 1 }]],
      [run([{ type: 'agent.finish', eventId: 5, cause: 4 }], thinking), []],
      [
        run([{ type: 'agent.rate_limited', eventId: 5, cause: 4, reason: 'slow down', retryAt: 9_000 }], thinking),
        [{ type: 'wake_at', deadline: { name: 'retry', at: 9_000 } }],
      ],
    ] as const) {
      expect(busy.can(output), JSON.stringify(busy.value)).toBe(true);
      const after = run([output], busy);
      expect(after.value).toEqual(busy.value);
      expect(after.context.pendingCommand).toBeNull();
      // Recording the output asks for nothing: no command, no new step.
      expect(effectsOf(busy), JSON.stringify(busy.value)).toEqual(asks);
      expect(effectsOf(after), JSON.stringify(busy.value)).toEqual(asks);
    }
    // Only the pending command's output: any other is still refused.
    expect(thinking.can({ ...output, cause: 3 })).toBe(false);
  });

  it('takes another step when a user message arrived during the step, answering that message', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }, { type: 'user.message', eventId: 3 }]);
    const after = run([{ type: 'agent.message', eventId: 4, cause: 2 }], running);
    expect(agentStateOf(after)).toBe('running');
    expect(effectsOf(after)).toEqual([{ type: 'ask_agent', cause: 3, attempt: 1 }]);
    expect(after.context.iterations).toBe(2);
    expect(after.context.stepCause).toBe(3);
  });

  it('stops in error with a reason when the iteration limit is reached', () => {
    let snapshot = run([connected, { type: 'user.message', eventId: 2 }]);
    let id = 3;
    for (let i = 0; i < 2; i++) {
      snapshot = run(
        [
          {
            type: 'agent.run',
            eventId: id,
            cause: snapshot.context.stepCause ?? -1,
            command: 'true',
            needsConfirmation: false,
          },
        ],
        snapshot,
      );
      snapshot = run([{ type: 'command.finished', eventId: id + 1, cause: id }], snapshot);
      id += 2;
    }
    expect(snapshot.context.iterations).toBe(3);
    snapshot = run(
      [
        {
          type: 'agent.run',
          eventId: id,
          cause: snapshot.context.stepCause ?? -1,
          command: 'true',
          needsConfirmation: false,
        },
      ],
      snapshot,
    );
    snapshot = run([{ type: 'command.finished', eventId: id + 1, cause: id }], snapshot);
    expect(agentStateOf(snapshot)).toBe('error');
    expect(snapshot.context.error).toMatch(/limit of 3 iterations/);
  });

  it('goes to error with the reason when the runtime fails, and a message tries again', () => {
    const failed = run([{ type: 'runtime.disconnected', eventId: 1, reason: 'bash exited' }]);
    expect(agentStateOf(failed)).toBe('error');
    expect(failed.context.error).toBe('bash exited');
    const retried = run([{ type: 'user.message', eventId: 2 }], failed);
    expect(agentStateOf(retried)).toBe('running');
    expect(retried.context.error).toBeNull();
  });

  it('lets a user stop a running agent and refuses states it does not allow', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    expect(running.can({ type: 'user.change_state', eventId: 3, state: 'finished' })).toBe(false);
    const stopped = run([{ type: 'user.change_state', eventId: 3, state: 'stopped' }], running);
    expect(agentStateOf(stopped)).toBe('stopped');
    expect(stopped.can({ type: 'agent.message', eventId: 4, cause: 2 })).toBe(false);
  });

  it('finishes when the agent says the task is done', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    expect(agentStateOf(run([{ type: 'agent.finish', eventId: 3, cause: 2 }], running))).toBe('finished');
  });
});

const thinking = (): SessionSnapshot => run([connected, { type: 'user.message', eventId: 2 }]);

describe('session machine: the rest of the lifecycle', () => {
  it('walks the start through creating, connecting and setting up before it is active', () => {
    let snapshot = run([{ type: 'runtime.connecting', eventId: 1 }]);
    expect(snapshot.value).toEqual({ starting: 'connecting' });
    snapshot = run([{ type: 'runtime.setting_up', eventId: 2 }], snapshot);
    expect(snapshot.value).toEqual({ starting: 'setting_up' });
    expect(snapshot.context.runtime).toBe('setting_up');
    expect(agentStateOf(run([{ type: 'runtime.connected', eventId: 3 }], snapshot))).toBe('awaiting_user_input');
  });

  it('takes every runtime step from any starting sub-state', () => {
    const settingUp = run([{ type: 'runtime.setting_up', eventId: 1 }]);
    expect(settingUp.value).toEqual({ starting: 'setting_up' });
    const again = run([{ type: 'runtime.starting', eventId: 2 }], settingUp);
    expect(again.value).toEqual({ starting: 'creating' });
    expect(again.context.runtime).toBe('starting');
    expect(run([{ type: 'runtime.connecting', eventId: 2 }], settingUp).value).toEqual({ starting: 'connecting' });
    // Still the runtime the creation asked for.
    expect(effectsOf(again)).toEqual([{ type: 'start_runtime', cause: 0 }]);
  });

  it("finishes a command only with its own output while executing; an older one's is recorded and changes nothing", () => {
    const executing = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'ls', needsConfirmation: false }],
      thinking(),
    );
    const older = run([{ type: 'command.finished', eventId: 4, cause: 2 }], executing);
    expect(older.value).toEqual(executing.value);
    expect(older.context.pendingCommand).toEqual(executing.context.pendingCommand);
    expect(executing.can({ type: 'command.finished', eventId: 4, cause: 99 })).toBe(false);
    expect(executing.can({ type: 'command.finished', eventId: 4, cause: undefined })).toBe(false);
    // Its own output ends it (an agent's command: the agent is asked again about it).
    const done = run([{ type: 'command.finished', eventId: 4, cause: 3 }], executing);
    expect(done.context.pendingCommand).toBeNull();
    expect(done.context.stepCause).toBe(4);
  });

  it('reports error with a reason when the start deadline passes, and not before', () => {
    const [start] = initialTransition(sessionMachine, { ...input, startDeadline: 1000 });
    const early = {
      type: 'deadline.passed',
      eventId: 1,
      name: 'start',
      at: 999,
      reason: 'did not start in time',
    } as const;
    expect(effectsOf(start)).toEqual([
      { type: 'start_runtime', cause: 0 },
      { type: 'wake_at', deadline: { name: 'start', at: 1000 } },
    ]);
    expect(start.can(early)).toBe(false);
    const late = run([{ ...early, at: 1000 }], start);
    expect(agentStateOf(late)).toBe('error');
    expect(late.context.error).toBe('did not start in time');
    expect(effectsOf(late)).toEqual([]);
  });

  it('pauses a thinking agent once its step answers (the step goes on meanwhile), and resumes with a new step', () => {
    const pausing = run([{ type: 'user.change_state', eventId: 3, state: 'paused' }], thinking());
    expect(agentStateOf(pausing)).toBe('running');
    expect(pausing.context.pausing).toBe(true);
    expect(effectsOf(pausing)).toEqual([{ type: 'ask_agent', cause: 2, attempt: 1 }]);
    expect(pausing.can({ type: 'user.change_state', eventId: 4, state: 'paused' }), 'a second pause').toBe(false);
    const paused = run([{ type: 'agent.message', eventId: 4, cause: 2 }], pausing);
    expect(agentStateOf(paused)).toBe('paused');
    expect(effectsOf(paused)).toEqual([]);
    const resumed = run([{ type: 'user.change_state', eventId: 5, state: 'running' }], paused);
    expect(agentStateOf(resumed)).toBe('running');
    expect(effectsOf(resumed)).toEqual([{ type: 'ask_agent', cause: 5, attempt: 1 }]);
    // Asking to run again while pausing takes the pause back: the step's answer then goes on as usual.
    const unpaused = run([{ type: 'user.change_state', eventId: 4, state: 'running' }], pausing);
    expect(unpaused.context.pausing).toBe(false);
    expect(agentStateOf(run([{ type: 'agent.message', eventId: 5, cause: 2 }], unpaused))).toBe('awaiting_user_input');
  });

  it('pauses at once under a version 7 log: the abandoned step is refused, and it resumes with a new step', () => {
    const v7 = run(
      [connected, { type: 'user.message', eventId: 2 }],
      initialTransition(sessionMachine, { ...input, machineVersion: 7 })[0],
    );
    const paused = run([{ type: 'user.change_state', eventId: 3, state: 'paused' }], v7);
    expect(agentStateOf(paused)).toBe('paused');
    expect(paused.can({ type: 'agent.message', eventId: 4, cause: 2 })).toBe(false);
    expect(effectsOf(paused)).toEqual([]);
    const resumed = run([{ type: 'user.change_state', eventId: 4, state: 'running' }], paused);
    expect(agentStateOf(resumed)).toBe('running');
    expect(effectsOf(resumed)).toEqual([{ type: 'ask_agent', cause: 4, attempt: 1 }]);
    expect(resumed.context.stepCause).toBe(4);
  });

  it('resumes a paused command without running it again when its output already came', () => {
    let snapshot = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'make', needsConfirmation: false }],
      thinking(),
    );
    snapshot = run([{ type: 'user.change_state', eventId: 4, state: 'paused' }], snapshot);
    snapshot = run([{ type: 'command.finished', eventId: 5, cause: 3 }], snapshot);
    expect(snapshot.context.pendingCommand).toBeNull();
    const resumed = run([{ type: 'user.change_state', eventId: 6, state: 'running' }], snapshot);
    expect(resumed.value).toEqual({ active: { running: 'thinking' } });
    // A new step, and no command: `make` is not run again.
    expect(effectsOf(resumed)).toEqual([{ type: 'ask_agent', cause: 6, attempt: 1 }]);
  });

  it('asks for confirmation of a risky command in confirmation mode and runs it only when confirmed', () => {
    const [start] = initialTransition(sessionMachine, { ...input, confirmationMode: true });
    const asked = run(
      [
        connected,
        { type: 'user.message', eventId: 2 },
        { type: 'agent.run', eventId: 3, cause: 2, command: 'rm -rf build', needsConfirmation: true },
      ],
      start,
    );
    expect(agentStateOf(asked)).toBe('awaiting_user_confirmation');
    expect(effectsOf(asked)).toEqual([]);
    const confirmed = run([{ type: 'user.change_state', eventId: 4, state: 'user_confirmed' }], asked);
    expect(effectsOf(confirmed)).toEqual([{ type: 'run_command', cause: 3, command: 'rm -rf build' }]);
    expect(agentStateOf(confirmed)).toBe('running');
    const rejected = run([{ type: 'user.change_state', eventId: 4, state: 'user_rejected' }], asked);
    expect(agentStateOf(rejected)).toBe('rejected');
    expect(rejected.context.pendingCommand).toBeNull();
    expect(effectsOf(rejected)).toEqual([]);
  });

  it('runs a risky command at once when confirmation mode is off', () => {
    const snapshot = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'rm -rf build', needsConfirmation: true }],
      thinking(),
    );
    expect(snapshot.value).toEqual({ active: { running: 'executing' } });
  });

  it('waits while rate limited and tries the step again when the retry deadline passes', () => {
    const limited = run(
      [{ type: 'agent.rate_limited', eventId: 3, cause: 2, reason: 'slow down', retryAt: 5000 }],
      thinking(),
    );
    expect(agentStateOf(limited)).toBe('rate_limited');
    expect(limited.context.deadline).toEqual({ name: 'retry', at: 5000 });
    expect(effectsOf(limited)).toEqual([{ type: 'wake_at', deadline: { name: 'retry', at: 5000 } }]);
    const retried = run([{ type: 'deadline.passed', eventId: 4, name: 'retry', at: 5001, reason: 'retry' }], limited);
    expect(agentStateOf(retried)).toBe('running');
    expect(effectsOf(retried)).toEqual([{ type: 'ask_agent', cause: 4, attempt: 1 }]);
    expect(retried.context.deadline).toBeNull();
  });

  it('leaves memory in any agent state but with a command out, and comes back in the same state', () => {
    for (const state of ['stopped', 'finished', 'error'] as const) {
      const base =
        state === 'stopped'
          ? run([{ type: 'user.change_state', eventId: 3, state: 'stopped' }], thinking())
          : state === 'finished'
            ? run([{ type: 'agent.finish', eventId: 3, cause: 2 }], thinking())
            : run([{ type: 'agent.failed', eventId: 3, cause: 2, reason: 'boom' }], thinking());
      const away = run([{ type: 'session.passivate', eventId: 4, reason: 'idle' }], base);
      expect(away.value).toBe('passivated');
      expect(agentStateOf(away)).toBe(state);
      const back = run([{ type: 'session.rehydrate', eventId: 5 }], away);
      expect(agentStateOf(back)).toBe(state);
    }
    const executing = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'sleep 9', needsConfirmation: false }],
      thinking(),
    );
    expect(executing.can({ type: 'session.passivate', eventId: 4, reason: 'idle' })).toBe(false);
  });

  it('comes back running and asks again for the step it was passivated in, without counting it again', () => {
    const away = run([{ type: 'session.passivate', eventId: 3, reason: 'too_many_running' }], thinking());
    expect(agentStateOf(away)).toBe('running');
    expect(effectsOf(away)).toEqual([]);
    const back = run([{ type: 'session.rehydrate', eventId: 4 }], away);
    expect(back.value).toEqual({ active: { running: 'thinking' } });
    // The retried step still answers the message it was asked about, and is the same iteration.
    expect(effectsOf(back)).toEqual([{ type: 'ask_agent', cause: 2, attempt: 1 }]);
    expect(back.context.stepCause).toBe(2);
    expect(back.context.iterations).toBe(away.context.iterations);
  });

  it('cannot be passivated while starting, and closes for good from anywhere', () => {
    const [start] = initialTransition(sessionMachine, input);
    expect(start.can({ type: 'session.passivate', eventId: 1, reason: 'idle' })).toBe(false);
    const closed = run([{ type: 'session.close', eventId: 1, reason: 'deleted' }], start);
    expect(closed.status).toBe('done');
    expect(closed.can({ type: 'user.message', eventId: 2 })).toBe(false);
  });
});

describe('session machine: limits', () => {
  it('stops in error when the budget is spent, and a user message gives it the same allowance again', () => {
    const [start] = initialTransition(sessionMachine, { ...input, maxIterations: 100, maxBudget: 1 });
    let snapshot = run([connected, { type: 'user.message', eventId: 2 }], start);
    snapshot = run(
      [
        { type: 'agent.usage', eventId: 3, cost: 0.6 },
        { type: 'agent.run', eventId: 4, cause: 2, command: 'ls', needsConfirmation: false },
      ],
      snapshot,
    );
    snapshot = run([{ type: 'command.finished', eventId: 5, cause: 4 }], snapshot);
    expect(agentStateOf(snapshot)).toBe('running');
    snapshot = run(
      [
        { type: 'agent.usage', eventId: 6, cost: 0.6 },
        { type: 'agent.run', eventId: 7, cause: 5, command: 'ls', needsConfirmation: false },
      ],
      snapshot,
    );
    snapshot = run([{ type: 'command.finished', eventId: 8, cause: 7 }], snapshot);
    expect(agentStateOf(snapshot)).toBe('error');
    expect(snapshot.context.error).toMatch(/spent \$1\.2000, its budget is \$1\.0000/);
    expect(effectsOf(snapshot)).toEqual([]);
    const resumed = run([{ type: 'user.message', eventId: 9 }], snapshot);
    expect(agentStateOf(resumed)).toBe('running');
    expect(effectsOf(resumed)).toEqual([{ type: 'ask_agent', cause: 9, attempt: 1 }]);
    expect(resumed.context.maxBudget).toBeCloseTo(2.2);
  });

  it('lets a user message extend a reached iteration limit by the original allowance', () => {
    let snapshot = thinking();
    for (let id = 3; snapshot.context.iterations < 3; id += 2) {
      snapshot = run(
        [
          {
            type: 'agent.run',
            eventId: id,
            cause: snapshot.context.stepCause!,
            command: 'true',
            needsConfirmation: false,
          },
        ],
        snapshot,
      );
      snapshot = run([{ type: 'command.finished', eventId: id + 1, cause: id }], snapshot);
    }
    snapshot = run(
      [
        {
          type: 'agent.run',
          eventId: 20,
          cause: snapshot.context.stepCause!,
          command: 'true',
          needsConfirmation: false,
        },
      ],
      snapshot,
    );
    snapshot = run([{ type: 'command.finished', eventId: 21, cause: 20 }], snapshot);
    expect(agentStateOf(snapshot)).toBe('error');
    const resumed = run([{ type: 'user.message', eventId: 22 }], snapshot);
    expect(agentStateOf(resumed)).toBe('running');
    expect(resumed.context.maxIterations).toBe(6);
  });

  it('gives up in error when the LLM keeps rate limiting past the retry limit', () => {
    // input allows 2 retries: the third rate limit in a row ends in error.
    let snapshot = thinking();
    for (let attempt = 0; attempt < 2; attempt++) {
      const id = 10 + attempt * 2;
      snapshot = run(
        [
          {
            type: 'agent.rate_limited',
            eventId: id,
            cause: snapshot.context.stepCause!,
            reason: 'slow down',
            retryAt: 0,
          },
        ],
        snapshot,
      );
      expect(agentStateOf(snapshot)).toBe('rate_limited');
      snapshot = run([{ type: 'deadline.passed', eventId: id + 1, name: 'retry', at: 1, reason: 'retry' }], snapshot);
    }
    snapshot = run(
      [
        {
          type: 'agent.rate_limited',
          eventId: 20,
          cause: snapshot.context.stepCause!,
          reason: 'slow down',
          retryAt: 0,
        },
      ],
      snapshot,
    );
    expect(agentStateOf(snapshot)).toBe('error');
    expect(snapshot.context.error).toMatch(/rate limited 3 times/);
  });
});

const disconnected: SessionEvent = { type: 'runtime.disconnected', eventId: 1, reason: 'bash exited' };

describe('session machine: losing the runtime and reconnecting', () => {
  it('refuses a reconnect while starting, and in an active state whose runtime is not lost', () => {
    const [start] = initialTransition(sessionMachine, input);
    expect(start.can({ type: 'user.reconnect_runtime', eventId: 1 })).toBe(false);
    expect(run([{ type: 'runtime.connecting', eventId: 1 }]).can({ type: 'user.reconnect_runtime', eventId: 2 })).toBe(
      false,
    );
    expect(run([connected]).can({ type: 'user.reconnect_runtime', eventId: 2 })).toBe(false);
    expect(thinking().can({ type: 'user.reconnect_runtime', eventId: 3 })).toBe(false);
  });

  it('records a lost runtime and fails a command at once instead of running it', () => {
    const lost = run([connected, { ...disconnected, eventId: 2 }]);
    expect(agentStateOf(lost)).toBe('error');
    expect(lost.context.runtime).toBe('disconnected');
    expect(lost.context.runtimeLost).toBe('bash exited');
    expect(effectsOf(lost)).toEqual([]);
    const executing = run([{ type: 'user.run', eventId: 3, command: 'ls' }], lost);
    expect(executing.value).toEqual({ active: { running: 'executing' } });
    expect(effectsOf(executing)).toEqual([{ type: 'fail_command', cause: 3, command: 'ls', why: 'bash exited' }]);
    // The failure comes back as the command's output; the runtime stays lost.
    const failed = run([{ type: 'command.finished', eventId: 4, cause: 3 }], executing);
    expect(agentStateOf(failed)).toBe('awaiting_user_input');
    expect(failed.context.runtimeLost).toBe('bash exited');
    expect(effectsOf(failed)).toEqual([]);
  });

  it('reconnects from error: asks for a runtime caused by the reconnect, then awaits the user once it connects', () => {
    const lost = run([connected, { ...disconnected, eventId: 2 }]);
    const reconnect = { type: 'user.reconnect_runtime', eventId: 3 } as const;
    expect(lost.can(reconnect)).toBe(true);
    const reconnecting = run([reconnect], lost);
    expect(agentStateOf(reconnecting)).toBe('error');
    expect(reconnecting.context).toMatchObject({ runtime: 'reconnecting', runtimeCause: 3, runtimeLost: null });
    expect(effectsOf(reconnecting)).toEqual([{ type: 'start_runtime', cause: 3 }]);
    const back = run([{ type: 'runtime.connected', eventId: 4 }], reconnecting);
    expect(agentStateOf(back)).toBe('awaiting_user_input');
    expect(back.context).toMatchObject({ runtime: 'connected', runtimeCause: 3, runtimeLost: null });
    expect(effectsOf(back)).toEqual([]);
  });

  it('reconnects from an error that did not lose the runtime too', () => {
    const failed = run([{ type: 'agent.failed', eventId: 3, cause: 2, reason: 'boom' }], thinking());
    expect(failed.context.runtimeLost).toBeNull();
    const reconnecting = run([{ type: 'user.reconnect_runtime', eventId: 4 }], failed);
    expect(reconnecting.context).toMatchObject({ runtime: 'reconnecting', runtimeCause: 4 });
    expect(effectsOf(reconnecting)).toEqual([{ type: 'start_runtime', cause: 4 }]);
  });

  it('reconnects in an active state other than error while the runtime is lost', () => {
    const lost = run([connected, { ...disconnected, eventId: 2 }]);
    const awaiting = run(
      [
        { type: 'user.run', eventId: 3, command: 'ls' },
        { type: 'command.finished', eventId: 4, cause: 3 },
      ],
      lost,
    );
    expect(agentStateOf(awaiting)).toBe('awaiting_user_input');
    const reconnecting = run([{ type: 'user.reconnect_runtime', eventId: 5 }], awaiting);
    expect(agentStateOf(reconnecting)).toBe('awaiting_user_input');
    expect(reconnecting.context).toMatchObject({ runtime: 'reconnecting', runtimeCause: 5, runtimeLost: null });
    expect(effectsOf(reconnecting)).toEqual([{ type: 'start_runtime', cause: 5 }]);
    const back = run([{ type: 'runtime.connected', eventId: 6 }], reconnecting);
    expect(back.context).toMatchObject({ runtime: 'connected', runtimeLost: null });
    expect(effectsOf(back)).toEqual([]);
    // Connected again: a new reconnect is refused.
    expect(back.can({ type: 'user.reconnect_runtime', eventId: 7 })).toBe(false);
  });
});

describe('session machine: coming back after a crash', () => {
  it('reports a command that was out interrupted and never runs it again', () => {
    const executing = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'make', needsConfirmation: false }],
      thinking(),
    );
    expect(effectsOf(executing)).toEqual([{ type: 'run_command', cause: 3, command: 'make' }]);
    const back = run([{ type: 'session.rehydrate', eventId: 4 }], executing);
    expect(back.value).toEqual({ active: { running: 'executing' } });
    expect(back.context.pendingCommand).toEqual({
      eventId: 3,
      source: 'agent',
      command: 'make',
      step: 2,
      interrupted: true,
    });
    expect(effectsOf(back)).toEqual([{ type: 'interrupt_command', cause: 3, command: 'make' }]);
    // Even with the runtime lost, the interrupted command is not failed or run.
    const lost = run([{ ...disconnected, eventId: 5 }], back);
    expect(effectsOf(lost)).toEqual([{ type: 'interrupt_command', cause: 3, command: 'make' }]);
    // Its report is the command's output: the agent goes on with it.
    const after = run([{ type: 'command.finished', eventId: 5, cause: 3 }], back);
    expect(after.context.pendingCommand).toBeNull();
    expect(effectsOf(after)).toEqual([{ type: 'ask_agent', cause: 5, attempt: 1 }]);
  });

  it('keeps a command waiting for confirmation pending, not interrupted, and runs it once confirmed', () => {
    const [start] = initialTransition(sessionMachine, { ...input, confirmationMode: true });
    const asked = run(
      [
        connected,
        { type: 'user.message', eventId: 2 },
        { type: 'agent.run', eventId: 3, cause: 2, command: 'rm -rf build', needsConfirmation: true },
      ],
      start,
    );
    const back = run([{ type: 'session.rehydrate', eventId: 4 }], asked);
    expect(agentStateOf(back)).toBe('awaiting_user_confirmation');
    expect(back.context.pendingCommand).toEqual({
      eventId: 3,
      source: 'agent',
      command: 'rm -rf build',
      needsConfirmation: true,
      step: 2,
    });
    expect(effectsOf(back)).toEqual([]);
    const confirmed = run([{ type: 'user.change_state', eventId: 5, state: 'user_confirmed' }], back);
    expect(effectsOf(confirmed)).toEqual([{ type: 'run_command', cause: 3, command: 'rm -rf build' }]);
  });
});

describe('session machine: running time and busy states', () => {
  it('sets runningSince from the event that starts the agent, and clears it when the agent stops running', () => {
    const running = run([connected, { type: 'user.message', eventId: 2, at: 1_000 }]);
    expect(running.context.runningSince).toBe(1_000);
    // Steps and commands inside running keep the time it started.
    const later = run(
      [
        { type: 'agent.run', eventId: 3, cause: 2, command: 'ls', needsConfirmation: false, at: 2_000 },
        { type: 'command.finished', eventId: 4, cause: 3, at: 3_000 },
      ],
      running,
    );
    expect(later.value).toEqual({ active: { running: 'thinking' } });
    expect(later.context.runningSince).toBe(1_000);
    const answered = run([{ type: 'agent.message', eventId: 5, cause: 4, at: 4_000 }], later);
    expect(agentStateOf(answered)).toBe('awaiting_user_input');
    expect(answered.context.runningSince).toBeNull();
    // A pause waits for the step's answer: running until then.
    const pausing = run([{ type: 'user.change_state', eventId: 5, state: 'paused', at: 4_000 }], later);
    expect(pausing.context.runningSince).toBe(1_000);
    const paused = run([{ type: 'agent.message', eventId: 6, cause: 4, at: 4_500 }], pausing);
    expect(agentStateOf(paused)).toBe('paused');
    expect(paused.context.runningSince).toBeNull();
    const resumed = run([{ type: 'user.change_state', eventId: 7, state: 'running', at: 5_000 }], paused);
    expect(resumed.context.runningSince).toBe(5_000);
  });

  it('is busy in loading, running and rate_limited, and only there', () => {
    expect([...BUSY_AGENT_STATES].sort()).toEqual(['loading', 'rate_limited', 'running']);
    const [start] = initialTransition(sessionMachine, input);
    const executing = run(
      [{ type: 'agent.run', eventId: 3, cause: 2, command: 'ls', needsConfirmation: false }],
      thinking(),
    );
    const limited = run(
      [{ type: 'agent.rate_limited', eventId: 3, cause: 2, reason: 'slow down', retryAt: 5000 }],
      thinking(),
    );
    for (const busy of [start, thinking(), executing, limited]) {
      expect(isBusy(busy), JSON.stringify(busy.value)).toBe(true);
      expect(BUSY_AGENT_STATES.has(agentStateOf(busy))).toBe(true);
    }
    const idle = [
      run([connected]),
      run(
        [
          { type: 'user.change_state', eventId: 3, state: 'paused' },
          { type: 'agent.message', eventId: 4, cause: 2 },
        ],
        thinking(),
      ),
      run([{ type: 'user.change_state', eventId: 3, state: 'stopped' }], thinking()),
      run([{ type: 'user.interrupt', eventId: 3 }], thinking()),
      run([{ type: 'agent.finish', eventId: 3, cause: 2 }], thinking()),
      run([{ type: 'agent.failed', eventId: 3, cause: 2, reason: 'boom' }], thinking()),
    ];
    for (const snapshot of idle) {
      expect(isBusy(snapshot), JSON.stringify(snapshot.value)).toBe(false);
      expect(BUSY_AGENT_STATES.has(agentStateOf(snapshot))).toBe(false);
    }
  });
});
