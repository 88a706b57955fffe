import { describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import type { SessionLimits } from '../../src/host/index.ts';
import { memoryConversationStore, memoryEventLog, memorySnapshotStore, type EventLog } from '../../src/store/index.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

const defaults = { confirmation_mode: false, max_iterations: 100, secrets: {} };

function manager(log: EventLog, startDelayMs: number, limits: Partial<SessionLimits>) {
  return memoryHost({
    log,
    conversations: memoryConversationStore(),
    snapshots: memorySnapshotStore(),
    runtimes: memoryRuntimeProvider(undefined, { startDelayMs }),
    agentFor: () => scriptedAgent(),
    limits,
  });
}

const events = async (log: EventLog, id: string): Promise<StoredEvent[]> =>
  (await log.read(id)).items.map((i) => i.event);

describe('session start', () => {
  it('reports error with a reason when the start does not finish before the start timeout', async () => {
    const log = memoryEventLog();
    const m = manager(log, 60_000, { startTimeoutMs: 150 });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await until(async () => (await m.session(id, 'local')).state === 'error', 'the start to time out');
    const stored = await events(log, id);
    expect(stored.find((e) => e.type === 'timeout')).toMatchObject({ data: { deadline: 'start' } });
    expect(stored.at(-1)).toMatchObject({
      type: 'agent_state_changed',
      data: { state: 'error', reason: expect.stringMatching(/start/) },
    });
  });

  it('does not time out a start that finishes in time', async () => {
    const log = memoryEventLog();
    const m = manager(log, 20, { startTimeoutMs: 400 });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    await until(async () => (await m.session(id, 'local')).state === 'awaiting_user_input', 'the start');
    await new Promise((r) => setTimeout(r, 500));
    expect((await events(log, id)).some((e) => e.type === 'timeout')).toBe(false);
    expect((await m.session(id, 'local')).state).toBe('awaiting_user_input');
  });

  it('lets a release wait for a start in progress, then releases', async () => {
    const log = memoryEventLog();
    const m = manager(log, 200, { startTimeoutMs: 5_000 });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    const session = await m.session(id, 'local');
    expect(session.state).toBe('loading');
    await session.release('test');
    expect(session.released).toBe(true);
    expect((await events(log, id)).some((e) => e.type === 'runtime_status' && e.data.status === 'connected')).toBe(
      true,
    );
  });

  it('releases a session whose start never finishes once the bound has passed', async () => {
    const log = memoryEventLog();
    const m = manager(log, 60_000, { startTimeoutMs: 150 });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    const session = await m.session(id, 'local');
    const started = Date.now();
    await session.release('test');
    expect(session.released).toBe(true);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

describe('rehydration', () => {
  it('brings back many passivated sessions one at a time and stores every action sent meanwhile, in order', async () => {
    const log = memoryEventLog();
    const conversations = memoryConversationStore();
    const snapshots = memorySnapshotStore();
    const make = () =>
      memoryHost({
        log,
        conversations,
        snapshots,
        runtimes: memoryRuntimeProvider(),
        agentFor: () => scriptedAgent(),
        // Eight conversations of one user run at once here, so the default per-user cap (3) would rightly
        // send five out of memory again: that cap is tested on its own (tooManyConversations, passivation e2e).
        limits: { rehydrateConcurrency: 1, maxRunningPerUser: 8 },
      });
    const first = make();
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push((await first.commands.create('local', defaults)).conversation_id);
    for (const id of ids)
      await until(async () => (await first.session(id, 'local')).state === 'awaiting_user_input', 'start');
    await first.shutdown();

    const second = make();
    const acts = ids.flatMap((id) =>
      [1, 2, 3].map((n) => second.commands.act(id, 'local', { type: 'message', content: `${id} #${n}` })),
    );
    await Promise.all(acts);
    for (const id of ids) {
      const texts = (await events(log, id)).flatMap((e) =>
        e.type === 'message' && e.source === 'user' ? [e.data.content] : [],
      );
      expect(texts).toEqual([1, 2, 3].map((n) => `${id} #${n}`));
    }
    expect(second.liveCount).toBe(ids.length);
  });
});
