import { describe, expect, it } from 'vitest';
import { effectsOf, foldEvents } from '../../machines/index.ts';
import { DecidedConversation } from './deciderConversation.ts';

// A conversation's repository, as the decider and the machine keep it (machine version 9). Pure.

const repository = { url: 'https://example.invalid/r.git', branch: 'main', token_secret: 'GIT_TOKEN' };
const files = [{ path: 'AGENTS.md', text: 'Be brief.', bytes: 9, truncated: false }];

/** A conversation with a repository whose runtime came as far as `setting_up`. */
function settingUp(): DecidedConversation {
  const c = new DecidedConversation({ repository, secret_names: ['GIT_TOKEN'] });
  for (const status of ['starting', 'connecting', 'setting_up'] as const)
    c.decide({ type: 'runtime_progress', status });
  return c;
}

const types = (c: DecidedConversation, from = 0) => c.events.slice(from).map((e) => e.type);

describe('a repository cloned while the runtime comes up', () => {
  it('stores the clone, then the instruction files, once, and the agent awaits the user', () => {
    const c = settingUp();
    expect(c.snapshot.context.repository).toEqual({
      url: repository.url,
      branch: 'main',
      tokenSecret: 'GIT_TOKEN',
      status: 'to_clone',
    });
    c.decide({ type: 'repository_cloned', branch: 'main', commit: 'a'.repeat(40) });
    c.decide({ type: 'instructions_loaded', files });
    c.decide({ type: 'runtime_progress', status: 'connected' });
    expect(c.snapshot.context.repository?.status).toBe('ready');
    expect(c.state).toBe('awaiting_user_input');
    expect(c.events.find((e) => e.type === 'repository_cloned')?.data).toEqual({
      url: repository.url,
      branch: 'main',
      commit: 'a'.repeat(40),
    });
    // Once: a second clone or a second reading is refused, and nothing is stored.
    expect(c.tryDecide({ type: 'repository_cloned', branch: 'main', commit: 'b'.repeat(40) }).ok).toBe(false);
    expect(c.tryDecide({ type: 'instructions_loaded', files }).ok).toBe(false);
    // A fold of the log comes to the same place.
    expect(foldEvents(c.events).snapshot.context.repository?.status).toBe('ready');
  });

  it('puts a failed clone in error with its reason, a stopped runtime that is not lost, and clones again on reconnect', () => {
    const c = settingUp();
    const before = c.events.length;
    c.decide({ type: 'clone_failed', message: 'Remote branch main not found in upstream origin' });
    expect(types(c, before)).toEqual(['repository_clone_failed', 'agent_state_changed']);
    expect(c.state).toBe('error');
    expect(c.snapshot.context).toMatchObject({
      runtime: 'stopped',
      runtimeLost: null,
      deadline: null,
      error: `the repository ${repository.url} could not be cloned: Remote branch main not found in upstream origin`,
    });
    // Nothing asks for a runtime by itself (a page refresh reconnects only a lost one).
    expect(effectsOf(c.snapshot)).toEqual([]);
    expect(c.snapshot.context.repository).toMatchObject({ status: 'failed', failure: c.snapshot.context.error });
    // A command meanwhile fails at once, with why: it does not clone again.
    const [run] = c.decide({ type: 'user_action', action: { type: 'run', command: 'ls' } });
    expect(effectsOf(c.snapshot)).toEqual([
      { type: 'fail_command', cause: run!.id, command: 'ls', why: c.snapshot.context.repository?.failure },
    ]);
    c.decide({ type: 'command_unavailable', cause: run!.id, command: 'ls', why: 'x' });
    expect(c.state).toBe('awaiting_user_input');
    const [reconnect] = c.decide({ type: 'user_action', action: { type: 'reconnect_runtime' } });
    expect(effectsOf(c.snapshot)).toEqual([{ type: 'start_runtime', cause: reconnect!.id }]);
    expect(c.snapshot.context.repository).toEqual({ ...c.snapshot.context.repository, status: 'to_clone' });
    expect(c.snapshot.context.repository?.failure).toBeUndefined();
    for (const status of ['starting', 'connecting', 'setting_up'] as const)
      c.decide({ type: 'runtime_progress', status });
    c.decide({ type: 'repository_cloned', branch: 'main', commit: 'c'.repeat(40) });
    c.decide({ type: 'instructions_loaded', files: [] });
    c.decide({ type: 'runtime_progress', status: 'connected' });
    expect(c.state).toBe('awaiting_user_input');
  });

  it('refuses repository facts in a conversation without a repository', () => {
    const c = new DecidedConversation();
    c.decide({ type: 'runtime_progress', status: 'setting_up' });
    expect(c.snapshot.context.repository).toBeNull();
    expect(c.tryDecide({ type: 'repository_cloned', branch: 'main', commit: 'a'.repeat(40) }).ok).toBe(false);
    expect(c.tryDecide({ type: 'clone_failed', message: 'x' }).ok).toBe(false);
  });
});
