import { beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { useE2e } from '../support/e2e.ts';
import { allEvents, createConversation, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor } from '../support/wsClient.ts';

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  server = await e2e.start({
    env: {
      TETHER_WS_FRAMES_PER_SECOND: '5',
      TETHER_WS_FRAME_BURST: '10',
      TETHER_MAX_CONNECTIONS_PER_CONVERSATION: '3',
      TETHER_WS_PING_MS: '300',
    },
  });
}, 60_000);

describe('connection limits', () => {
  it('answers frames over the rate with error frames, stores none of them, and closes a client that keeps going', async () => {
    const id = await createConversation(server.baseUrl);
    const client = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    await client.waitFor((f) => f.type === 'sync');
    for (let i = 0; i < 10; i++) client.send({ type: 'ping' });
    for (let i = 0; i < 5; i++) client.sendMessage(`over the rate ${i}`);
    await client.waitFor((f) => f.type === 'error' && f.code === 'RATE_LIMITED', {
      what: 'a RATE_LIMITED error frame',
    });
    const stored = (await allEvents(server.baseUrl, id)).filter(
      (e) => e.event.type === 'message' && e.event.source === 'user',
    );
    expect(stored).toEqual([]);
    for (let i = 0; i < 30; i++) client.send({ type: 'ping' });
    expect((await client.closed).code).toBe(1008);
  });

  it('closes one connection too many to a conversation with 4029 and lets the others be', async () => {
    const id = await createConversation(server.baseUrl);
    const open = await Promise.all([1, 2, 3].map(() => WsClient.connect(wsUrlFor(server.wsUrl, id))));
    for (const c of open) await c.waitFor((f) => f.type === 'sync');
    const extra = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    expect((await extra.closed).code).toBe(4029);
    await open[0]!.roundTrip();
    await open[0]!.close();
    const again = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    await again.waitFor((f) => f.type === 'sync', { what: 'room again after one left' });
    await Promise.all([...open.slice(1), again].map((c) => c.close()));
  });

  it('drops a peer that stops answering pings within two intervals, and keeps one that answers', async () => {
    const id = await createConversation(server.baseUrl);
    // A raw `ws` socket, not the protocol client: a peer that does not answer pings needs ws's autoPong off.
    const silent = new WebSocket(wsUrlFor(server.wsUrl, id), { autoPong: false });
    const closed = new Promise<number>((resolve) => silent.on('close', () => resolve(Date.now())));
    await new Promise((resolve) => silent.once('open', resolve));
    const openedAt = Date.now();
    const polite = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    const droppedAt = await closed;
    expect(droppedAt - openedAt).toBeLessThan(2 * 300 + 400);
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(polite.isOpen).toBe(true);
    await polite.close();
  });
});
