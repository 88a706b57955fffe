import { afterEach, describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { LoggedEvent, StatusFrame } from '../../protocol/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryStores, type EventLog } from '../../src/store/index.ts';
import { createTether, type Tether } from '../../src/tether.ts';
import { WsClient } from '../support/wsClient.ts';
import { wrapLog, type FollowableLog } from '../support/wrapLog.ts';

const tethers: Tether[] = [];
afterEach(async () => {
  await Promise.all(tethers.splice(0).map((t) => t.close()));
});

/** A log whose follow loses the events `drop` picks, as a follow that fell behind or restarted past them would. */
function lossyFeed(
  log: FollowableLog,
  drop: (logged: LoggedEvent) => boolean,
): { log: EventLog; dropped: LoggedEvent[] } {
  const dropped: LoggedEvent[] = [];
  return {
    dropped,
    log: wrapLog(log, {
      follow: (handlers) =>
        log.follow({
          ...handlers,
          event: (conversationId, logged) => {
            if (drop(logged)) dropped.push(logged);
            else handlers.event(conversationId, logged);
          },
        }),
    }),
  };
}

describe('the live feed misses events', () => {
  it('a client of another node still gets every event once and in order: the next event after a gap makes its subscription read the gap from the log', async () => {
    // Two Tethers on the same stores: A runs the session, B's client gets A's events through B's follow of the log.
    const stores = memoryStores();
    // The agent's messages and its `running` states are lost on the way to the clients; the
    // `awaiting_user_input` that ends each answer gets through (a gap shows only when a later event comes).
    const { log, dropped } = lossyFeed(
      stores.log,
      ({ event }) =>
        (event.type === 'message' && event.source === 'agent') ||
        (event.type === 'agent_state_changed' && event.data.state === 'running'),
    );
    const a = createTether({ stores, runtimes: memoryRuntimeProvider(), agent: scriptedAgent(), newId: () => 'conv1' });
    const b = createTether({ stores: { ...stores, log }, runtimes: memoryRuntimeProvider(), agent: scriptedAgent() });
    tethers.push(a, b);
    const { port } = await b.listen(0, '127.0.0.1');
    await a.host.commands.create('local', { confirmation_mode: false, max_iterations: 100, secrets: {} });
    const ws = await WsClient.connect(`ws://127.0.0.1:${port}/ws?conversation_id=conv1`);
    await ws.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
    for (const content of ['one', 'two', 'three', 'four']) {
      const from = ws.frames.length;
      await a.host.commands.act('conv1', 'local', { type: 'message', content });
      await ws.waitFor(
        (f) =>
          f.type === 'event' &&
          f.event.source === 'agent' &&
          f.event.type === 'message' &&
          f.event.data.content.includes(content),
        { from, what: `the answer to "${content}"` },
      );
    }
    const stored = (await stores.log.read('conv1')).items;
    await ws.waitUntil(() => ws.lastSeq() >= stored.at(-1)!.seq, { what: 'every event' });
    expect(dropped.length).toBeGreaterThanOrEqual(8);
    expect(b.host.isLive('conv1')).toBe(false);
    expect(ws.events().map((f) => ({ seq: f.seq, event: f.event }))).toEqual(stored);
    expect(ws.invalid).toEqual([]);
  });
});

describe('a status frame while a client joins', () => {
  it('reaches the client after `sync`, which stays its first frame', async () => {
    // B's client joins a conversation A runs, so B reads where it stands from the log; a
    // status frame published meanwhile (as one over NATS can be) must wait for `sync`.
    const stores = memoryStores();
    const status: StatusFrame = { type: 'status', level: 'info', id: 'STATUS$TEST_WHILE_JOINING', message: 'joining' };
    let joining = false;
    const log = wrapLog(stores.log, {
      read: (id, options) => {
        if (joining) stores.status.publish('conv1', status);
        joining = false;
        return stores.log.read(id, options);
      },
    });
    const a = createTether({ stores, runtimes: memoryRuntimeProvider(), agent: scriptedAgent(), newId: () => 'conv1' });
    const b = createTether({ stores: { ...stores, log }, runtimes: memoryRuntimeProvider(), agent: scriptedAgent() });
    tethers.push(a, b);
    const { port } = await b.listen(0, '127.0.0.1');
    await a.host.commands.create('local', { confirmation_mode: false, max_iterations: 100, secrets: {} });
    joining = true;
    const ws = await WsClient.connect(`ws://127.0.0.1:${port}/ws?conversation_id=conv1`);
    await ws.waitFor((f) => f.type === 'status' && f.id === status.id, { what: 'the status frame' });
    expect(ws.frames.map((f) => f.type).slice(0, 2)).toEqual(['sync', 'status']);
    expect(ws.invalid).toEqual([]);
  });
});

describe('an event stored while a client joins', () => {
  it('reaches the client even when nothing follows it: the connection listens before it reads where the conversation stands', async () => {
    // B's client joins conv1, which A runs. While B reads the log for the join, A stores the last events there
    // will be for a while (a stop); a connection that read the high-water mark before listening never got them.
    const stores = memoryStores();
    const a = createTether({ stores, runtimes: memoryRuntimeProvider(), agent: scriptedAgent(), newId: () => 'conv1' });
    let during: (() => Promise<void>) | null = null;
    const log = wrapLog(stores.log, {
      read: async (id, options) => {
        const page = await stores.log.read(id, options);
        const work = during;
        during = null;
        await work?.();
        return page;
      },
    });
    const b = createTether({ stores: { ...stores, log }, runtimes: memoryRuntimeProvider(), agent: scriptedAgent() });
    tethers.push(a, b);
    const { port } = await b.listen(0, '127.0.0.1');
    await a.host.commands.create('local', { confirmation_mode: false, max_iterations: 100, secrets: {} });
    const ready = async () => (await stores.log.read('conv1')).items.at(-1)?.event;
    while ((await ready())?.type !== 'agent_state_changed') await new Promise((r) => setTimeout(r, 5));
    during = async () => {
      await a.host.commands.act('conv1', 'local', { type: 'change_agent_state', state: 'stopped' });
    };
    const ws = await WsClient.connect(`ws://127.0.0.1:${port}/ws?conversation_id=conv1`);
    await ws.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
    expect(during).toBeNull();
    const stored = (await stores.log.read('conv1')).items;
    await ws.waitUntil(() => ws.lastSeq() >= stored.at(-1)!.seq, { what: 'the events stored during the join' });
    expect(ws.events().map((f) => ({ seq: f.seq, event: f.event }))).toEqual(stored);
  });
});
