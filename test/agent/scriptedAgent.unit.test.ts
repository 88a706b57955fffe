import { describe, expect, it } from 'vitest';
import { scriptedAgent, ScriptedAgent, type AgentAction } from '../../src/agent/index.ts';
import { StoredEvent } from '../../protocol/index.ts';
import { stepOver } from '../support/agentSteps.ts';

type Draft = Pick<StoredEvent, 'source' | 'type' | 'data'> & { cause?: number };

/**
 * Stamps drafts into valid stored events with dense ids, as the log would. An
 * output without a cause answers the latest command before it, as the host's are.
 */
function history(...drafts: Draft[]): StoredEvent[] {
  let lastCommand: number | undefined;
  return drafts.map((draft, id) => {
    if (draft.type === 'command') lastCommand = id;
    const cause = draft.type === 'command_output' && draft.cause === undefined ? lastCommand : draft.cause;
    return StoredEvent.parse({
      v: 1,
      id,
      conversation_id: 'c1',
      ts: '2025-01-01T00:00:00.000Z',
      ...draft,
      ...(cause !== undefined && { cause }),
    });
  });
}

const created = (initial_message?: string): Draft => ({
  source: 'user',
  type: 'conversation_created',
  data: {
    user: 'local',
    confirmation_mode: false,
    max_iterations: 10,
    secret_names: [],
    replay: false,
    ...(initial_message === undefined ? {} : { initial_message }),
  },
});
const userSays = (content: string): Draft => ({ source: 'user', type: 'message', data: { content } });
const agentSays = (content: string): Draft => ({ source: 'agent', type: 'message', data: { content } });
const agentRuns = (command: string): Draft => ({ source: 'agent', type: 'command', data: { command } });
const output = (data: Partial<Extract<StoredEvent, { type: 'command_output' }>['data']> = {}): Draft => ({
  source: 'environment',
  type: 'command_output',
  data: { command: 'ls', exit_code: 0, output: '', timed_out: false, truncated: false, ...data },
});
const running: Draft = { source: 'environment', type: 'agent_state_changed', data: { state: 'running' } };

function step(...drafts: Draft[]): Promise<AgentAction> {
  return stepOver(scriptedAgent(), history(...drafts));
}

async function reply(...drafts: Draft[]): Promise<string> {
  const action = await step(...drafts);
  if (action.type !== 'message') throw new Error(`expected a message, got ${JSON.stringify(action)}`);
  return action.content;
}

describe('ScriptedAgent', () => {
  it('runs the command of a user message that starts with "!"', async () => {
    await expect(step(created(), userSays('  !  ls -la  '))).resolves.toEqual({
      type: 'run',
      command: 'ls -la',
      securityRisk: 'LOW',
    });
  });

  it('runs a multi-line command as given after the "!"', async () => {
    await expect(step(userSays('!cd src\nls'))).resolves.toEqual({
      type: 'run',
      command: 'cd src\nls',
      securityRisk: 'LOW',
    });
  });

  it('says there is nothing to run for a bare "!"', async () => {
    expect(await reply(userSays('!'))).toContain('nothing to run');
  });

  it('answers help with how to run commands', async () => {
    const content = await reply(userSays('help'));
    expect(content).toContain('!ls');
    expect(content).toContain('scripted agent');
  });

  it('acknowledges any other message by echoing it and saying how to run commands', async () => {
    const content = await reply(userSays('hello there'));
    expect(content).toContain('"hello there"');
    expect(content).toContain('!ls');
  });

  it('shortens a long message it echoes', async () => {
    const content = await reply(userSays('x'.repeat(5_000)));
    expect(content.length).toBeLessThan(600);
    expect(content).toContain('x'.repeat(200));
  });

  it('looks past lifecycle events to the latest user message', async () => {
    await expect(step(userSays('!pwd'), running)).resolves.toEqual({
      type: 'run',
      command: 'pwd',
      securityRisk: 'LOW',
    });
  });

  it('answers the initial message once: the creation record names it, the message event is what counts', async () => {
    await expect(step(created('!whoami'), userSays('!whoami'), running)).resolves.toEqual({
      type: 'run',
      command: 'whoami',
      securityRisk: 'LOW',
    });
    const afterAnswer = await step(
      created('!whoami'),
      userSays('!whoami'),
      agentRuns('whoami'),
      output(),
      agentSays('done'),
    );
    expect(afterAnswer.type).toBe('finish');
  });

  it('answers messages that queued up while it worked one by one, oldest first, skipping none', async () => {
    const queued = [userSays('first'), userSays('!echo second')];
    expect(await reply(...queued)).toContain('"first"');
    await expect(step(...queued, agentSays('You said: "first"'))).resolves.toEqual({
      type: 'run',
      command: 'echo second',
      securityRisk: 'LOW',
    });
  });

  it('goes on after its message while more messages wait, and waits for the user after the last one', async () => {
    const queued = [userSays('first'), userSays('second'), userSays('third')];
    const first = await step(...queued);
    expect(first).toMatchObject({ type: 'message', waitForResponse: false });
    const second = await step(...queued, agentSays('You said: "first"'));
    expect(second).toMatchObject({ type: 'message', waitForResponse: false });
    expect(second.type === 'message' && second.content).toContain('"second"');
    const third = await step(...queued, agentSays('You said: "first"'), agentSays('You said: "second"'));
    expect(third.type === 'message' && third.content).toContain('"third"');
    expect(third).not.toHaveProperty('waitForResponse');
  });

  it('does not answer the output of a command the user ran', async () => {
    const userRuns: Draft = { source: 'user', type: 'command', data: { command: 'ls' } };
    expect(await reply(userRuns, output(), userSays('hi'))).toContain('"hi"');
  });

  it('greets and explains itself when there is nothing to answer yet', async () => {
    expect(await reply(created(), running)).toContain('!ls');
  });

  it('summarises the output of its command with the exit code and the output', async () => {
    const content = await reply(userSays('!ls'), agentRuns('ls'), output({ exit_code: 0, output: 'a.txt\nb.txt\n' }));
    expect(content).toContain('exited with code 0');
    expect(content).toContain('a.txt\nb.txt');
  });

  it('reports a failing exit code', async () => {
    const content = await reply(agentRuns('false'), output({ command: 'false', exit_code: 1 }));
    expect(content).toContain('`false` exited with code 1');
    expect(content).toContain('printed nothing');
  });

  it('reports a timed out command', async () => {
    const content = await reply(
      agentRuns('sleep 99'),
      output({ command: 'sleep 99', exit_code: null, timed_out: true }),
    );
    expect(content).toContain('timed out');
  });

  it('reports a command interrupted without timing out', async () => {
    const content = await reply(agentRuns('make'), output({ command: 'make', exit_code: null, output: 'building\n' }));
    expect(content).toContain('was interrupted');
    expect(content).toContain('building');
  });

  it('keeps only the first lines of a long output and says it shortened them', async () => {
    const long = Array.from({ length: 500 }, (_, i) => `line ${i}`).join('\n');
    const content = await reply(agentRuns('seq'), output({ output: long }));
    expect(content).toContain('line 0\nline 1');
    expect(content).not.toContain('line 499');
    expect(content).toContain('output shortened');
    expect(content.length).toBeLessThan(2_300);
  });

  it('says the output was shortened when the runtime truncated it', async () => {
    const content = await reply(agentRuns('yes'), output({ output: 'y\ny\n', truncated: true }));
    expect(content).toContain('output shortened');
  });

  it('finishes instead of repeating itself when it already answered', async () => {
    const answered = await step(userSays('!ls'), agentRuns('ls'), output(), agentSays('`ls` exited with code 0.'));
    expect(answered.type).toBe('finish');
  });

  it('gives the same action for the same history', async () => {
    const events = [userSays('hi'), agentSays('hello'), userSays('what now?')];
    const first = await step(...events);
    expect(first).toEqual(await stepOver(new ScriptedAgent(), history(...events), { conversationId: 'other' }));
    expect(first).toMatchObject({ type: 'message', content: expect.stringContaining('what now?') });
  });

  it('rejects when its signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort(new Error('stopped'));
    const stepping = stepOver(scriptedAgent(), [], { signal: controller.signal });
    await expect(stepping).rejects.toThrow('stopped');
  });

  it('thinks for its delay before answering, and stops thinking when aborted', async () => {
    const agent = scriptedAgent({ delayMs: 200 });
    const started = Date.now();
    await stepOver(agent, history(userSays('hi')));
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    const abort = new AbortController();
    const step = stepOver(agent, history(userSays('hi')), { signal: abort.signal });
    abort.abort();
    await expect(step).rejects.toThrow();
  });
});
