import { afterEach, describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryStores } from '../../src/store/index.ts';
import { createTether, type Tether } from '../../src/tether.ts';
import { http } from '../support/serverProcess.ts';
import { WsClient, type Frame } from '../support/wsClient.ts';

const stateIs = (state: string) => (f: Frame) =>
  f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === state;

let tether: Tether | undefined;
afterEach(async () => {
  await tether?.close();
  tether = undefined;
});

describe('createTether', () => {
  it('builds a whole server from explicit dependencies: REST creates, the WebSocket chats, close stops both', async () => {
    const stores = memoryStores();
    let ids = 0;
    tether = createTether({
      stores,
      runtimes: memoryRuntimeProvider(),
      agent: scriptedAgent(),
      clock: () => new Date('2026-01-02T03:04:05.000Z'),
      newId: () => `conv${++ids}`,
      server: { authenticate: async () => 'ada' },
    });
    const { port } = await tether.listen(0, '127.0.0.1');
    const base = `http://127.0.0.1:${port}`;

    const created = await http<{ conversation_id: string }>(base, 'POST', '/api/conversations', {});
    expect(created.status).toBe(201);
    expect(created.body.conversation_id).toBe('conv1');

    const ws = await WsClient.connect(`ws://127.0.0.1:${port}/ws?conversation_id=conv1`);
    await ws.waitFor(stateIs('awaiting_user_input'), { what: 'the start' });
    const from = ws.frames.length;
    ws.sendMessage('hello');
    await ws.waitFor((f) => f.type === 'event' && f.event.source === 'agent' && f.event.type === 'message', {
      from,
      what: "the agent's answer",
    });
    await ws.waitFor(stateIs('awaiting_user_input'), { from, what: 'awaiting the user again' });

    // Everything went through the stores handed in, stamped by the injected clock, owned by the authenticated user.
    const page = await stores.log.read('conv1');
    expect(page.items.length).toBeGreaterThan(5);
    expect(new Set(page.items.map((item) => item.event.ts))).toEqual(new Set(['2026-01-02T03:04:05.000Z']));
    expect((await stores.conversations.get('ada', 'conv1'))?.user).toBe('ada');

    await tether.close();
    expect((await ws.closed).code).toBe(1001);
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
    tether = undefined;
  });
});
