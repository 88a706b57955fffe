import { describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { StatusFrame, StoredEvent } from '../../protocol/index.ts';
import { echoHandler, memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryConversationStore, memoryEventLog, memorySnapshotStore } from '../../src/store/index.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

const defaults = { confirmation_mode: false, max_iterations: 100, secrets: {} };

/** A conversation whose runtime holds `sleep` commands until the test kills it. */
async function setup() {
  const log = memoryEventLog();
  const runtimes = memoryRuntimeProvider((command, env) =>
    command.startsWith('sleep') ? new Promise(() => {}) : echoHandler(command, env),
  );
  const m = memoryHost({
    log,
    conversations: memoryConversationStore(),
    snapshots: memorySnapshotStore(),
    runtimes,
    agentFor: () => scriptedAgent(),
  });
  const { conversation_id: id } = await m.commands.create('local', defaults);
  const statuses: StatusFrame[] = [];
  m.feed.listen(id, 0, { event: () => {}, status: (frame) => statuses.push(frame) });
  const state = async () => (await m.session(id, 'local')).state;
  await until(async () => (await state()) === 'awaiting_user_input', 'the start');
  const events = async (): Promise<StoredEvent[]> => (await log.read(id)).items.map((i) => i.event);
  return { m, id, runtimes, statuses, state, events };
}

describe('a runtime that dies', () => {
  it('stops the agent loop: its death is stored before the cut command gets an error observation, and the agent is in error', async () => {
    const { m, id, runtimes, statuses, state, events } = await setup();
    await m.commands.act(id, 'local', { type: 'message', content: '!sleep 100' });
    await until(async () => (await events()).some((e) => e.type === 'command'), 'the command');
    runtimes.created[0]!.kill();
    await until(async () => (await events()).some((e) => e.type === 'command_output'), 'the observation');
    await until(async () => (await state()) === 'error', 'the error state');
    const stored = await events();
    const death = stored.findIndex((e) => e.type === 'runtime_status' && e.data.status === 'disconnected');
    const output = stored.findIndex((e) => e.type === 'command_output');
    expect(death).toBeGreaterThan(-1);
    expect(death).toBeLessThan(output);
    expect(stored[output]).toMatchObject({ data: { exit_code: null, output: expect.stringMatching(/not available/) } });
    // The agent loop stopped: no agent step after the observation.
    expect(stored.slice(output + 1).filter((e) => e.source === 'agent')).toEqual([]);
    expect(statuses.map((s) => s.id)).toContain('STATUS$ERROR_RUNTIME_DISCONNECTED');
  });

  it('still answers messages while down, and gives commands an error observation without starting a runtime', async () => {
    const { m, id, runtimes, state, events } = await setup();
    runtimes.created[0]!.kill();
    await until(async () => (await state()) === 'error', 'the error state');
    await m.commands.act(id, 'local', { type: 'message', content: 'are you there?' });
    await until(async () => (await events()).some((e) => e.source === 'agent' && e.type === 'message'), 'an answer');
    await until(async () => (await state()) !== 'running', 'the answer to settle');
    await m.commands.act(id, 'local', { type: 'run', command: 'echo hi' });
    await until(async () => (await events()).some((e) => e.type === 'command_output'), 'the observation');
    const output = (await events()).find((e) => e.type === 'command_output');
    expect(output).toMatchObject({ data: { exit_code: null, output: expect.stringMatching(/reconnect/i) } });
    expect(runtimes.created).toHaveLength(1);
  });

  it('comes back on a new connection: a new runtime in the same workspace, awaiting the user, and commands work again', async () => {
    const { m, id, runtimes, state, events } = await setup();
    runtimes.created[0]!.kill();
    await until(async () => (await state()) === 'error', 'the error state');
    await m.commands.connect(id, 'local');
    await until(async () => (await state()) === 'awaiting_user_input', 'the reconnect');
    expect(runtimes.created).toHaveLength(2);
    expect(runtimes.created[1]!.workspace).toBe(runtimes.created[0]!.workspace);
    // The reconnect is the user's, stored as such: the page refresh asked for it.
    expect((await events()).some((e) => e.type === 'reconnect_runtime' && e.source === 'user')).toBe(true);
    await m.commands.act(id, 'local', { type: 'run', command: 'echo back' });
    await until(async () => (await events()).some((e) => e.type === 'command_output'), 'the output');
    expect((await events()).find((e) => e.type === 'command_output')).toMatchObject({
      data: { exit_code: 0, output: 'back\n' },
    });
  });

  it('comes back on a reconnect_runtime action too', async () => {
    const { m, id, runtimes, state } = await setup();
    runtimes.created[0]!.kill();
    await until(async () => (await state()) === 'error', 'the error state');
    await m.commands.act(id, 'local', { type: 'reconnect_runtime' });
    await until(async () => (await state()) === 'awaiting_user_input', 'the reconnect');
    expect(runtimes.created).toHaveLength(2);
  });
});
