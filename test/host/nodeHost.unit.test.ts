import { describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { ConversationNotFoundError, IllegalTransitionError, SessionUnavailableError } from '../../src/errors.ts';
import type { NodeHost } from '../../src/host/index.ts';
import {
  memoryConversationStore,
  memoryEventLog,
  memorySnapshotStore,
  type ConversationStore,
  type EventLog,
  type SnapshotStore,
} from '../../src/store/index.ts';
import { memoryHost } from '../support/memoryHost.ts';

function manager(
  log: EventLog = memoryEventLog(),
  conversations: ConversationStore = memoryConversationStore(),
  snapshots: SnapshotStore = memorySnapshotStore(),
) {
  let n = 0;
  return memoryHost({
    log,
    conversations,
    snapshots,
    runtimes: memoryRuntimeProvider(),
    agentFor: () => scriptedAgent(),
    clock: () => new Date(Date.UTC(2026, 0, 1, 0, 0, n++)),
  });
}

const defaults = { confirmation_mode: false, max_iterations: 100, secrets: {} };

async function settle(m: NodeHost, id: string, state = 'awaiting_user_input'): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const session = await m.session(id, 'local');
    if (session.state === state) return;
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`conversation never reached ${state}`);
}

/** A conversation that answered its first message, then passivated by its host's shutdown; the stores stay. */
async function passivatedOnShutdown() {
  const log = memoryEventLog();
  const conversations = memoryConversationStore();
  const snapshots = memorySnapshotStore();
  const first = manager(log, conversations, snapshots);
  const { conversation_id: id } = await first.commands.create('local', { ...defaults, initial_message: 'one' });
  await settle(first, id);
  await first.shutdown();
  return { log, conversations, snapshots, id };
}

async function allEvents(log: EventLog, id: string): Promise<StoredEvent[]> {
  return (await log.read(id)).items.map((i: LoggedEvent) => i.event);
}

describe('a node host', () => {
  it('records the rate-limit retry bound of its limits in each new conversation, as the machine reads it', async () => {
    const log = memoryEventLog();
    const m = memoryHost({ log, limits: { rateLimitRetries: 2 } });
    try {
      const { conversation_id: id } = await m.commands.create('local', defaults);
      const [created] = await allEvents(log, id);
      expect(created).toMatchObject({ type: 'conversation_created', data: { max_rate_limit_retries: 2 } });
      expect((await m.session(id, 'local')).snapshot?.context.maxRateLimitRetries).toBe(2);
    } finally {
      await m.shutdown();
    }
  });

  it('stores the creation, the runtime start, the message, each state change and the reply, in that order', async () => {
    const log = memoryEventLog();
    const m = manager(log);
    const { conversation_id: id } = await m.commands.create('local', { ...defaults, initial_message: 'hello' });
    await settle(m, id);
    const events = await allEvents(log, id);
    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i));
    const kinds = events.map(
      (e) => `${e.source}:${e.type}${e.type === 'agent_state_changed' ? `:${e.data.state}` : ''}`,
    );
    expect(kinds[0]).toBe('user:conversation_created');
    expect(kinds).toContain('user:message');
    expect(kinds.slice(-3)).toEqual([
      'environment:agent_state_changed:running',
      'agent:message',
      'environment:agent_state_changed:awaiting_user_input',
    ]);
    expect(kinds.indexOf('environment:runtime_status')).toBeLessThan(
      kinds.indexOf('environment:agent_state_changed:running'),
    );
  });

  it('runs a command for a message starting with ! and stores its output as an observation of the command', async () => {
    const log = memoryEventLog();
    const m = manager(log);
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await settle(m, id);
    await m.commands.act(id, 'local', { type: 'message', content: '!echo tether' });
    await settle(m, id);
    const events = await allEvents(log, id);
    const command = events.find((e) => e.type === 'command');
    const output = events.find((e) => e.type === 'command_output');
    expect(command?.source).toBe('agent');
    expect(output?.cause).toBe(command?.id);
    expect(output?.type === 'command_output' && output.data.output).toBe('tether\n');
  });

  it('answers every message sent back to back while the agent thinks, each exactly once and in order', async () => {
    const log = memoryEventLog();
    const m = memoryHost({
      log,
      conversations: memoryConversationStore(),
      snapshots: memorySnapshotStore(),
      runtimes: memoryRuntimeProvider(),
      agentFor: () => scriptedAgent({ delayMs: 30 }),
    });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await settle(m, id);
    for (const text of ['one', 'two', 'three', 'four'])
      await m.commands.act(id, 'local', { type: 'message', content: text });
    await settle(m, id);
    const replies = (await allEvents(log, id)).flatMap((e) =>
      e.type === 'message' && e.source === 'agent' ? [/You said: "(\w+)"/.exec(e.data.content)?.[1]] : [],
    );
    expect(replies).toEqual(['one', 'two', 'three', 'four']);
  });

  it('refuses an illegal state change with the current state and stores nothing', async () => {
    const log = memoryEventLog();
    const m = manager(log);
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await settle(m, id);
    const before = (await allEvents(log, id)).length;
    const attempt = m.commands.act(id, 'local', { type: 'change_agent_state', state: 'finished' });
    await expect(attempt).rejects.toBeInstanceOf(IllegalTransitionError);
    await expect(attempt).rejects.toThrow(/awaiting_user_input/);
    expect(await allEvents(log, id)).toHaveLength(before);
  });

  it('stores an action retried with the same client_id once', async () => {
    const log = memoryEventLog();
    const m = manager(log);
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await settle(m, id);
    const first = await m.commands.act(id, 'local', { type: 'message', content: 'once' }, 'client-1');
    await settle(m, id);
    const settled = await allEvents(log, id);
    const again = await m.commands.act(id, 'local', { type: 'message', content: 'once' }, 'client-1');
    expect(again).toEqual({ seq: first.seq, duplicate: true });
    // Not applied again either: no new state change, no second reply.
    expect((await m.session(id, 'local')).state).toBe('awaiting_user_input');
    await new Promise((r) => setTimeout(r, 20));
    expect(await allEvents(log, id)).toEqual(settled);
    const messages = (await allEvents(log, id)).filter((e) => e.type === 'message' && e.source === 'user');
    expect(messages).toHaveLength(1);
  });

  it('passivates on shutdown and comes back from its snapshot in a new process, continuing with dense ids', async () => {
    const { log, conversations, snapshots, id } = await passivatedOnShutdown();
    const stored = await allEvents(log, id);
    expect(stored.at(-1)).toMatchObject({
      type: 'session_passivated',
      data: { reason: 'shutdown', state: 'awaiting_user_input' },
    });
    expect((await snapshots.get(id))?.seq).toBe(await log.lastSeq(id));

    const second = manager(log, conversations, snapshots);
    const info = await second.queries.info(id, 'local');
    expect(info).toMatchObject({ state: 'awaiting_user_input', in_memory: false });
    await second.commands.act(id, 'local', { type: 'message', content: 'two' });
    await settle(second, id);
    const events = await allEvents(log, id);
    expect(events[stored.length]).toMatchObject({
      type: 'session_rehydrated',
      data: { from: 'snapshot', events_folded: 0 },
    });
    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i));
    const replies = events.filter((e) => e.type === 'message' && e.source === 'agent');
    expect(replies).toHaveLength(2);
  });

  it('folds the whole log when the snapshot was written by another machine version', async () => {
    const { log, conversations, snapshots, id } = await passivatedOnShutdown();
    const record = (await snapshots.get(id))!;
    await snapshots.put({ ...record, machine_version: record.machine_version + 1, snapshot: { value: 'nonsense' } });
    const second = manager(log, conversations, snapshots);
    expect((await second.session(id, 'local')).state).toBe('awaiting_user_input');
    const rehydrated = (await allEvents(log, id)).find((e) => e.type === 'session_rehydrated');
    expect(rehydrated).toMatchObject({ data: { from: 'log' } });
  });

  it('stops writing when another writer appended to the same conversation', async () => {
    const log = memoryEventLog();
    const conversations = memoryConversationStore();
    const a = manager(log, conversations);
    const { conversation_id: id } = await a.commands.create('local', defaults);
    await settle(a, id);
    const b = manager(log, conversations);
    await b.commands.act(id, 'local', { type: 'message', content: 'from b' });
    await expect(a.commands.act(id, 'local', { type: 'message', content: 'from a' })).rejects.toBeInstanceOf(
      SessionUnavailableError,
    );
    const texts = (await allEvents(log, id)).flatMap((e) =>
      e.type === 'message' && e.source === 'user' ? [e.data.content] : [],
    );
    expect(texts).toEqual(['from b']);
  });

  it('hides a conversation from another user as if it did not exist', async () => {
    const m = manager();
    const { conversation_id: id } = await m.commands.create('alice', defaults);
    await expect(m.queries.info(id, 'bob')).rejects.toBeInstanceOf(ConversationNotFoundError);
    await expect(m.commands.act(id, 'bob', { type: 'message', content: 'hi' })).rejects.toBeInstanceOf(
      ConversationNotFoundError,
    );
    expect(await m.queries.list('bob', { limit: 10 })).toEqual({ items: [], next: null });
    expect((await m.queries.list('alice', { limit: 10 })).items.map((c) => c.conversation_id)).toEqual([id]);
  });

  it('reports a command as interrupted, not run again, when the process died while it ran', async () => {
    const log = memoryEventLog();
    const conversations = memoryConversationStore();
    let runs = 0;
    const hanging = memoryHost({
      log,
      conversations,
      snapshots: memorySnapshotStore(),
      runtimes: memoryRuntimeProvider(() => {
        runs += 1;
        return new Promise(() => {});
      }),
      agentFor: () => scriptedAgent(),
    });
    const { conversation_id: id } = await hanging.commands.create('local', defaults);
    await settle(hanging, id);
    await hanging.commands.act(id, 'local', { type: 'run', command: 'sleep 100' });
    expect(runs).toBe(1);
    // The process "dies": a new manager on the same log, the old one never finishes.
    const revived = manager(log, conversations);
    await revived.session(id, 'local');
    await settle(revived, id);
    const output = (await allEvents(log, id)).find((e) => e.type === 'command_output');
    expect(output?.type === 'command_output' && output.data.output).toMatch(/interrupted/);
    expect(runs).toBe(1);
  });
});

describe('session manager retries', () => {
  it('answers a retried state change as a duplicate, not as an illegal transition', async () => {
    const log = memoryEventLog();
    const m = manager(log);
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await settle(m, id);
    const first = await m.commands.act(id, 'local', { type: 'change_agent_state', state: 'stopped' }, 'stop-1');
    const retry = await m.commands.act(id, 'local', { type: 'change_agent_state', state: 'stopped' }, 'stop-1');
    expect(retry).toEqual({ seq: first.seq, duplicate: true });
    await expect(
      m.commands.act(id, 'local', { type: 'change_agent_state', state: 'stopped' }, 'stop-2'),
    ).rejects.toBeInstanceOf(IllegalTransitionError);
    const stops = (await allEvents(log, id)).filter((e) => e.type === 'change_agent_state');
    expect(stops).toHaveLength(1);
  });
});

describe('session manager snapshots', () => {
  it('writes a snapshot every N events of each conversation, however many conversations share the stream', async () => {
    const log = memoryEventLog();
    const store = memorySnapshotStore();
    const puts = new Map<string, number>();
    const counting: SnapshotStore = {
      put: async (record) => {
        puts.set(record.conversation_id, (puts.get(record.conversation_id) ?? 0) + 1);
        await store.put(record);
      },
      get: (id) => store.get(id),
      delete: (id) => store.delete(id),
    };
    const m = memoryHost({
      log,
      conversations: memoryConversationStore(),
      snapshots: counting,
      runtimes: memoryRuntimeProvider(),
      agentFor: () => scriptedAgent(),
      // Four running at once: lift the per-user cap, whose passivations write snapshots too.
      limits: { snapshotEvery: 10, maxRunningPerUser: 10 },
    });
    const ids = await Promise.all(
      [1, 2, 3, 4].map(async () => (await m.commands.create('local', defaults)).conversation_id),
    );
    for (const id of ids) await settle(m, id);
    for (let round = 0; round < 5; round++) {
      await Promise.all(ids.map((id) => m.commands.act(id, 'local', { type: 'message', content: `round ${round}` })));
      for (const id of ids) await settle(m, id);
    }
    for (const id of ids) {
      const events = (await allEvents(log, id)).length;
      expect(puts.get(id)).toBe(Math.floor(events / 10));
    }
  });
});
