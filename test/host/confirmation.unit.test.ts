import { describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryConversationStore, memoryEventLog, memorySnapshotStore } from '../../src/store/index.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

async function setup(confirmationMode: boolean) {
  const log = memoryEventLog();
  const ran: string[] = [];
  const m = memoryHost({
    log,
    conversations: memoryConversationStore(),
    snapshots: memorySnapshotStore(),
    runtimes: memoryRuntimeProvider((command) => {
      ran.push(command);
      return { exit_code: 0, output: '', timed_out: false, truncated: false };
    }),
    agentFor: () => scriptedAgent(),
  });
  const { conversation_id: id } = await m.commands.create('local', {
    confirmation_mode: confirmationMode,
    max_iterations: 100,
    secrets: {},
  });
  const state = async () => (await m.session(id, 'local')).state;
  const events = async (): Promise<StoredEvent[]> => (await log.read(id)).items.map((i) => i.event);
  await until(async () => (await state()) === 'awaiting_user_input', 'the start');
  return { m, id, ran, state, events };
}

describe('confirmation mode', () => {
  it('holds a high-risk agent command until the user confirms it, then runs it', async () => {
    const { m, id, ran, state, events } = await setup(true);
    await m.commands.act(id, 'local', { type: 'message', content: '!rm -rf build' });
    await until(async () => (await state()) === 'awaiting_user_confirmation', 'the confirmation request');
    expect((await events()).find((e) => e.type === 'command')).toMatchObject({
      source: 'agent',
      data: { risk: 'high' },
    });
    expect(ran).toEqual([]);
    await m.commands.act(id, 'local', { type: 'change_agent_state', state: 'user_confirmed' });
    await until(async () => (await events()).some((e) => e.type === 'command_output'), 'the output');
    expect(ran).toEqual(['rm -rf build']);
  });

  it('never runs a high-risk command the user rejected', async () => {
    const { m, id, ran, state } = await setup(true);
    await m.commands.act(id, 'local', { type: 'message', content: '!sudo reboot' });
    await until(async () => (await state()) === 'awaiting_user_confirmation', 'the confirmation request');
    await m.commands.act(id, 'local', { type: 'change_agent_state', state: 'user_rejected' });
    expect(await state()).toBe('rejected');
    await new Promise((r) => setTimeout(r, 20));
    expect(ran).toEqual([]);
  });

  it('runs low-risk commands without asking, and high-risk ones too when confirmation mode is off', async () => {
    const asking = await setup(true);
    await asking.m.commands.act(asking.id, 'local', { type: 'message', content: '!ls' });
    await until(async () => asking.ran.length === 1, 'the low-risk command');
    const free = await setup(false);
    await free.m.commands.act(free.id, 'local', { type: 'message', content: '!rm -rf build' });
    await until(async () => free.ran.length === 1, 'the command without confirmation');
    expect(free.ran).toEqual(['rm -rf build']);
  });
});
