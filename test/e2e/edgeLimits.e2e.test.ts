import { connect } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { useE2e } from '../support/e2e.ts';
import { allEvents, createConversation, http, type ServerProcess } from '../support/serverProcess.ts';
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
      // No tokens: the Host header is checked, and this is one more name of the server's.
      TETHER_PUBLIC_URL: 'http://tether.test:8080',
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

/**
 * One request over a raw socket, so that any Host (or none, in HTTP/1.0) can be
 * sent: the status line and the body of the answer, or of a handshake's.
 */
function exchange(port: number, head: string, body = ''): Promise<{ status: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    const done = () => {
      const [top = '', rest = ''] = text.split('\r\n\r\n', 2);
      resolve({ status: top.split('\r\n')[0] ?? '', body: rest });
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
      // An accepted handshake stays open: its head is all there is to see.
      if (text.startsWith('HTTP/1.1 101') && text.includes('\r\n\r\n')) socket.destroy();
    });
    socket.on('close', done);
    socket.on('error', reject);
    const length =
      body === '' ? '' : `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
    // Written, not ended: a server sees a half-closed socket as gone before it answers.
    socket.write(`${head}\r\n${length}\r\n${body}`);
  });
}

const withHost = (host: string | undefined) => (host === undefined ? '' : `\r\nHost: ${host}`);
const rest = (method: string, path: string, host: string | undefined, body?: string) =>
  exchange(
    server.port,
    `${method} ${path} HTTP/1.${host === undefined ? 0 : 1}${withHost(host)}\r\nConnection: close`,
    body,
  );
const handshake = (host: string, id: string) =>
  exchange(
    server.port,
    `GET /ws?conversation_id=${id} HTTP/1.1${withHost(host)}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13',
  );
const codeOf = (answer: { body: string }) => (JSON.parse(answer.body) as { error: { code: string } }).error.code;

describe('the Host header, without tokens (DNS rebinding)', () => {
  const ids = async () =>
    (await http<{ items: Array<{ conversation_id: string }> }>(server.baseUrl, 'GET', '/api/conversations')).body.items
      .map((c) => c.conversation_id)
      .sort();

  it('refuses another name with 403 FOREIGN_HOST on reads, writes and the WebSocket handshake, and stores nothing', async () => {
    const id = await createConversation(server.baseUrl);
    const before = await ids();
    const evil = `evil.example:${server.port}`;
    const requests: Array<[string, string, string | undefined, string?]> = [
      ['POST', '/api/conversations', evil, '{"initial_message":"from another site"}'],
      ['POST', `/api/conversations/${id}/actions`, evil, '{"action":{"type":"message","content":"from evil"}}'],
      ['GET', '/api/conversations', evil],
      ['GET', `/api/conversations/${id}/events`, evil],
      ['GET', '/', evil],
      ['DELETE', `/api/conversations/${id}`, evil],
      // HTTP/1.0 without a Host at all.
      ['GET', '/api/conversations', undefined],
    ];
    for (const [method, path, host, body] of requests) {
      const answer = await rest(method, path, host, body);
      expect({ method, path, host, status: answer.status, code: codeOf(answer) }).toEqual({
        method,
        path,
        host,
        status: expect.stringMatching(/^HTTP\/1\.1 403 /),
        code: 'FOREIGN_HOST',
      });
    }
    const refused = await handshake(evil, id);
    expect([refused.status, codeOf(refused)]).toEqual(['HTTP/1.1 403 Forbidden', 'FOREIGN_HOST']);
    expect(await ids()).toEqual(before);
    const messages = (await allEvents(server.baseUrl, id)).filter((e) => JSON.stringify(e.event).includes('from evil'));
    expect(messages).toEqual([]);
  });

  it('serves loopback names, the listening address and the host of TETHER_PUBLIC_URL, and probes under any name', async () => {
    const id = await createConversation(server.baseUrl);
    const port = server.port;
    // 127.0.0.1 is also the address the test server listens on (TETHER_HOST).
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `app.localhost:${port}`, `TETHER.test:${port}`]) {
      const list = await rest('GET', '/api/conversations', host);
      expect([host, list.status]).toEqual([host, 'HTTP/1.1 200 OK']);
      expect((await handshake(host, id)).status, host).toBe('HTTP/1.1 101 Switching Protocols');
    }
    const created = await rest('POST', '/api/conversations', `tether.test:${port}`, '{"initial_message":"by name"}');
    expect(created.status).toBe('HTTP/1.1 201 Created');
    for (const path of ['/healthz', '/readyz', '/metrics'])
      expect([path, (await rest('GET', path, 'tether-1:3000')).status]).toEqual([path, 'HTTP/1.1 200 OK']);
  });
});
