import { describe, expect, it } from 'vitest';
import { scriptedAgent, type Agent } from '../../src/agent/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { memoryStores, type EventLog, type Stores } from '../../src/store/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { wrapLog } from '../support/wrapLog.ts';
import { CountingLog } from '../support/countingLog.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

const defaults = { confirmation_mode: false, max_iterations: 100, secrets: {} };

function manager(stores: Stores, agent: () => Agent = () => scriptedAgent(), log: EventLog = stores.log) {
  let n = 0;
  return memoryHost({
    ...stores,
    log,
    runtimes: memoryRuntimeProvider(),
    agentFor: agent,
    clock: () => new Date(Date.UTC(2026, 0, 1, 0, 0, n++)),
  });
}

/** An agent whose steps wait until released. */
function gatedAgent() {
  let release: () => void = () => {};
  const agent: Agent = {
    context: () => ({
      observe: () => {},
      step: () =>
        new Promise((resolve) => {
          release = () => resolve({ type: 'message', content: 'done' });
        }),
    }),
  };
  return { agent, release: () => release() };
}

describe('the conversation index', () => {
  it('lists passivated conversations with their state, newest first, paged, one log read per item', async () => {
    const stores = memoryStores();
    const log = new CountingLog(stores.log);
    const m = manager(stores, () => scriptedAgent(), log);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await m.commands.create('ada', defaults)).conversation_id);
    await until(async () =>
      (await stores.conversations.list('ada', { limit: 10 })).items.every((e) => e.state === 'awaiting_user_input'),
    );
    await m.commands.act(ids[0]!, 'ada', { type: 'change_agent_state', state: 'stopped' });
    await m.shutdown();
    const fresh = new CountingLog(stores.log);
    const later = manager(stores, () => scriptedAgent(), fresh);
    const first = await later.queries.list('ada', { limit: 3 });
    expect(first.items.map((c) => c.conversation_id)).toEqual(ids.slice(2).reverse());
    const second = await later.queries.list('ada', { limit: 3, after: first.next! });
    expect(second.items.map((c) => c.conversation_id)).toEqual(ids.slice(0, 2).reverse());
    expect(second.next).toBeNull();
    expect(second.items.at(-1)).toMatchObject({ state: 'stopped', in_memory: false, user: 'ada' });
    for (const c of [...first.items, ...second.items]) {
      expect(c.last_seq).toBe(await stores.log.lastSeq(c.conversation_id));
      expect(fresh.callsFor(c.conversation_id)).toEqual(['lastSeq']);
    }
    expect(later.liveCount).toBe(0);
    expect((await later.queries.list('bob', { limit: 3 })).items).toEqual([]);
  });

  it('marks a conversation unsettled before the append that makes it busy, and answers after the entry holds the new state', async () => {
    const stores = memoryStores();
    const gate = gatedAgent();
    const markerAtAppend: Array<[string, boolean | undefined]> = [];
    const log = wrapLog(stores.log, {
      append: async (event: StoredEvent, options) => {
        if (event.type === 'agent_state_changed') {
          const marker = (await stores.conversations.markers()).find(
            (m) => m.conversation_id === event.conversation_id,
          );
          markerAtAppend.push([event.data.state, marker?.unsettled]);
        }
        return stores.log.append(event, options);
      },
    });
    const m = manager(stores, () => gate.agent, log);
    const { conversation_id: id } = await m.commands.create('ada', defaults);
    await until(async () => (await stores.conversations.get('ada', id))?.state === 'awaiting_user_input');
    expect((await stores.conversations.markers())[0]).toMatchObject({ conversation_id: id, unsettled: false });
    await m.commands.act(id, 'ada', { type: 'message', content: 'hi' });
    // Answered: the entry already says running.
    expect(await stores.conversations.get('ada', id)).toMatchObject({ state: 'running', in_memory: true });
    gate.release();
    await until(async () => (await stores.conversations.markers())[0]?.unsettled === false);
    expect(await stores.conversations.get('ada', id)).toMatchObject({ state: 'awaiting_user_input' });
    // Every state fact was appended while the marker said unsettled.
    expect(markerAtAppend).toEqual([
      ['awaiting_user_input', true],
      ['running', true],
      ['awaiting_user_input', true],
    ]);
    await m.shutdown();
    expect(await stores.conversations.markers()).toEqual([]);
    expect(await stores.conversations.get('ada', id)).toMatchObject({ in_memory: false });
  });

  it('rewrites an entry that lags its log when the session loads', async () => {
    const stores = memoryStores();
    const m = manager(stores);
    const { conversation_id: id } = await m.commands.create('ada', defaults);
    await until(async () => (await stores.conversations.get('ada', id))?.state === 'awaiting_user_input');
    await m.shutdown();
    const entry = (await stores.conversations.get('ada', id))!;
    await stores.conversations.put({ ...entry, state: 'error' });
    const later = manager(stores);
    await later.session(id, 'ada');
    expect(await stores.conversations.get('ada', id)).toEqual({
      ...entry,
      state: 'awaiting_user_input',
      in_memory: true,
    });
    await later.shutdown();
  });

  it('repairs a stale unsettled marker from the one log it reads, and reads none for a settled one', async () => {
    const stores = memoryStores();
    const m = manager(stores);
    const { conversation_id: stale } = await m.commands.create('ada', defaults);
    const { conversation_id: settled } = await m.commands.create('bob', defaults);
    await until(async () => (await stores.conversations.markers()).every((marker) => !marker.unsettled));
    // A crash between an append and the index writes after it: the marker says too much, the entry too little.
    await stores.conversations.mark({ conversation_id: stale, user: 'ada', unsettled: true });
    await stores.conversations.put({ ...(await stores.conversations.get('ada', stale))!, state: 'running' });
    const log = new CountingLog(stores.log);
    const later = manager(stores, () => scriptedAgent(), log);
    expect(await later.recover()).toBe(0);
    expect(log.callsFor(stale)).toEqual(['last']);
    expect(log.callsFor(settled)).toEqual([]);
    expect(await stores.conversations.get('ada', stale)).toMatchObject({
      state: 'awaiting_user_input',
      in_memory: false,
    });
    expect(await stores.conversations.get('bob', settled)).toMatchObject({ in_memory: false });
    expect(await stores.conversations.markers()).toEqual([]);
    expect(later.liveCount).toBe(0);
  });

  it('keeps the marker of a conversation shut down mid-step, so the next process brings it back; idle ones leave none', async () => {
    const stores = memoryStores();
    const gate = gatedAgent();
    const m = manager(stores, () => gate.agent);
    const { conversation_id: busy } = await m.commands.create('ada', { ...defaults, initial_message: 'think' });
    const { conversation_id: idle } = await m.commands.create('ada', defaults);
    await until(async () => (await stores.conversations.get('ada', idle))?.state === 'awaiting_user_input');
    await until(async () => (await m.session(busy, 'ada')).state === 'running');
    await m.shutdown();
    expect(await stores.conversations.markers()).toEqual([{ conversation_id: busy, user: 'ada', unsettled: true }]);
    expect(await stores.conversations.get('ada', busy)).toMatchObject({ state: 'running', in_memory: false });
    const log = new CountingLog(stores.log);
    const later = manager(stores, () => scriptedAgent(), log);
    expect(await later.recover()).toBe(1);
    expect(log.callsFor(idle)).toEqual([]);
    expect(later.isLive(busy)).toBe(true);
    await later.shutdown();
  });

  it('deleting a conversation removes its entry and marker', async () => {
    const stores = memoryStores();
    const m = manager(stores);
    const { conversation_id: id } = await m.commands.create('ada', defaults);
    await m.commands.delete(id, 'ada');
    expect(await stores.conversations.get('ada', id)).toBeUndefined();
    expect(await stores.conversations.markers()).toEqual([]);
    await m.shutdown();
  });
});
