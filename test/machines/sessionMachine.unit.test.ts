import { describe, expect, it } from 'vitest';
import { initialTransition, transition } from 'xstate';
import { agentStateOf, sessionMachine, type SessionEvent, type SessionSnapshot } from '../../machines/index.ts';

const input = { conversationId: 'c1', maxIterations: 3 };

function actionTypes(actions: Array<{ type: string }>): string[] {
  return actions.map((a) => a.type).filter((t) => !t.startsWith('xstate.'));
}

function run(events: SessionEvent[], start?: SessionSnapshot): SessionSnapshot {
  let snapshot = start ?? initialTransition(sessionMachine, input)[0];
  for (const event of events) [snapshot] = transition(sessionMachine, snapshot, event);
  return snapshot;
}

const connected: SessionEvent = { type: 'runtime.connected', eventId: 1 };

describe('session machine as pure functions', () => {
  it('starts in loading and asks the host to start the runtime', () => {
    const [snapshot, actions] = initialTransition(sessionMachine, input);
    expect(snapshot.value).toBe('starting');
    expect(agentStateOf(snapshot)).toBe('loading');
    expect(actionTypes(actions)).toContain('startRuntime');
  });

  it('waits for the user once the runtime connects without an initial message', () => {
    const snapshot = run([connected]);
    expect(agentStateOf(snapshot)).toBe('awaiting_user_input');
  });

  it('runs the agent on connect when a message arrived while starting', () => {
    let snapshot = run([{ type: 'user.message', eventId: 1 }]);
    expect(agentStateOf(snapshot)).toBe('loading');
    const [next, actions] = transition(sessionMachine, snapshot, { type: 'runtime.connected', eventId: 2 });
    snapshot = next;
    expect(agentStateOf(snapshot)).toBe('running');
    expect(actionTypes(actions)).toContain('askAgent');
    expect(snapshot.context.stepCause).toBe(2);
  });

  it('goes running on a user message and back to awaiting on the answer to that step', () => {
    const [running, actions] = transition(sessionMachine, run([connected]), { type: 'user.message', eventId: 2 });
    expect(agentStateOf(running)).toBe('running');
    expect(actionTypes(actions)).toEqual(expect.arrayContaining(['askAgent']));
    const answered = run([{ type: 'agent.message', eventId: 3, cause: 2 }], running);
    expect(agentStateOf(answered)).toBe('awaiting_user_input');
  });

  it('refuses an agent answer that belongs to an abandoned step', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    const stale = { type: 'agent.message', eventId: 3, cause: 99 } as const;
    expect(running.can(stale)).toBe(false);
    expect(running.can({ ...stale, cause: 2 })).toBe(true);
  });

  it('runs an agent command, then asks the agent again with the observation', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }]);
    const [executing, actions] = transition(sessionMachine, running, {
      type: 'agent.run',
      eventId: 3,
      cause: 2,
      command: 'ls',
    });
    expect(actionTypes(actions)).toContain('runCommand');
    expect(executing.context.pendingCommand).toEqual({ eventId: 3, source: 'agent', command: 'ls' });
    const [after, next] = transition(sessionMachine, executing, { type: 'command.finished', eventId: 4, cause: 3 });
    expect(agentStateOf(after)).toBe('running');
    expect(actionTypes(next)).toContain('askAgent');
    expect(after.context.pendingCommand).toBeNull();
    expect(after.context.stepCause).toBe(4);
  });

  it('returns to awaiting after a user command without asking the agent', () => {
    const [executing, actions] = transition(sessionMachine, run([connected]), {
      type: 'user.run',
      eventId: 2,
      command: 'pwd',
    });
    expect(actionTypes(actions)).toEqual(['runCommand']);
    const [after, next] = transition(sessionMachine, executing, { type: 'command.finished', eventId: 3, cause: 2 });
    expect(agentStateOf(after)).toBe('awaiting_user_input');
    expect(actionTypes(next)).not.toContain('askAgent');
  });

  it('takes another step when a user message arrived during the step', () => {
    const running = run([connected, { type: 'user.message', eventId: 2 }, { type: 'user.message', eventId: 3 }]);
    const [after, actions] = transition(sessionMachine, running, { type: 'agent.message', eventId: 4, cause: 2 });
    expect(agentStateOf(after)).toBe('running');
    expect(actionTypes(actions)).toContain('askAgent');
    expect(after.context.iterations).toBe(2);
  });

  it('stops in error with a reason when the iteration limit is reached', () => {
    let snapshot = run([connected, { type: 'user.message', eventId: 2 }]);
    let id = 3;
    for (let i = 0; i < 2; i++) {
      snapshot = run([{ type: 'agent.run', eventId: id, cause: snapshot.context.stepCause ?? -1, command: 'true' }], snapshot);
      snapshot = run([{ type: 'command.finished', eventId: id + 1, cause: id }], snapshot);
      id += 2;
    }
    expect(snapshot.context.iterations).toBe(3);
    snapshot = run([{ type: 'agent.run', eventId: id, cause: snapshot.context.stepCause ?? -1, command: 'true' }], snapshot);
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
