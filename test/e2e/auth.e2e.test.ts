import { request } from 'node:http';
import { SignJWT } from 'jose';
import { WebSocket } from 'ws';
import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { http, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor } from '../support/wsClient.ts';

const ALICE = 'alice-token-0123456789';
const JWT_SECRET = 'a-jwt-secret-of-at-least-32-characters!!';
let BOB = '';

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  // Bob signs in with a JWT, Alice with a plain token.
  BOB = await new SignJWT({})
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('bob')
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(JWT_SECRET));
  server = await e2e.start({ env: { TETHER_TOKENS: `${ALICE}:alice`, TETHER_JWT_SECRET: JWT_SECRET } });
}, 60_000);

async function create(token: string): Promise<string> {
  const res = await http<{ conversation_id: string }>(
    server.baseUrl,
    'POST',
    '/api/conversations',
    { initial_message: 'mine' },
    token,
  );
  expect(res.status).toBe(201);
  return res.body.conversation_id;
}

async function wsClose(url: string): Promise<number> {
  const client = await WsClient.connect(url).catch(() => null);
  return client ? (await client.closed).code : -1;
}

describe('auth', () => {
  it('refuses every REST route and the WebSocket without a valid token', async () => {
    const id = await create(ALICE);
    for (const [method, path] of [
      ['GET', '/api/conversations'],
      ['POST', '/api/conversations'],
      ['GET', `/api/conversations/${id}`],
      ['GET', `/api/conversations/${id}/events`],
      ['POST', `/api/conversations/${id}/actions`],
      ['POST', `/api/conversations/${id}/stop`],
      ['DELETE', `/api/conversations/${id}`],
    ] as const) {
      expect((await http(server.baseUrl, method, path)).status, `${method} ${path}`).toBe(401);
      expect(
        (await http(server.baseUrl, method, path, undefined, 'wrong-token')).status,
        `${method} ${path} with a wrong token`,
      ).toBe(401);
    }
    const forged = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('alice')
      .sign(new TextEncoder().encode('another-secret-of-32-characters-or-more'));
    expect((await http(server.baseUrl, 'GET', '/api/conversations', undefined, forged)).status).toBe(401);
    expect(await wsClose(wsUrlFor(server.wsUrl, id))).toBe(4001);
    expect(await wsClose(`${wsUrlFor(server.wsUrl, id)}&token=wrong`)).toBe(4001);
    expect((await http(server.baseUrl, 'GET', '/healthz')).status).toBe(200);
  });

  it('shows each user only their own conversations, through every door', async () => {
    const alices = await create(ALICE);
    const bobs = await create(BOB);
    const list = async (token: string) =>
      (
        await http<{ items: Array<{ conversation_id: string }> }>(
          server.baseUrl,
          'GET',
          '/api/conversations',
          undefined,
          token,
        )
      ).body.items.map((c) => c.conversation_id);
    expect(await list(ALICE)).toContain(alices);
    expect(await list(ALICE)).not.toContain(bobs);
    expect(await list(BOB)).toEqual([bobs]);

    // Bob reaching for Alice's conversation finds nothing there, the same answer as for an unknown id.
    const doors = [
      ['GET', `/api/conversations/${alices}`, undefined],
      ['GET', `/api/conversations/${alices}/events`, undefined],
      ['POST', `/api/conversations/${alices}/actions`, { action: { type: 'message', content: 'hi' } }],
      ['POST', `/api/conversations/${alices}/stop`, undefined],
      ['DELETE', `/api/conversations/${alices}`, undefined],
    ] as const;
    for (const [method, path, body] of doors) {
      const res = await http<{ error: { code: string } }>(server.baseUrl, method, path, body, BOB);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error.code).toBe('CONVERSATION_NOT_FOUND');
    }
    expect(await wsClose(`${wsUrlFor(server.wsUrl, alices)}&token=${BOB}`)).toBe(4004);

    // Alice still has it whole: nothing Bob tried was stored.
    const events = await http<{
      items: Array<{ event: { source: string; type: string; data: { content?: string } } }>;
    }>(server.baseUrl, 'GET', `/api/conversations/${alices}/events`, undefined, ALICE);
    expect(events.status).toBe(200);
    expect(events.body.items.filter((i) => i.event.type === 'message' && i.event.data.content === 'hi')).toEqual([]);
    const client = await WsClient.connect(`${wsUrlFor(server.wsUrl, alices)}&token=${ALICE}`);
    await client.waitFor((f) => f.type === 'sync', { what: 'sync for the owner' });
    await client.close();
  });

  it('refuses another site: a POST or DELETE, and a WebSocket handshake, whose Origin is not this server’s', async () => {
    const id = await create(ALICE);
    const conversations = async () =>
      (await http<{ items: unknown[] }>(server.baseUrl, 'GET', '/api/conversations', undefined, ALICE)).body.items
        .length;
    const before = await conversations();
    const foreign = { origin: 'https://evil.example', authorization: `Bearer ${ALICE}` };
    for (const [method, path, body] of [
      ['POST', '/api/conversations', '{"initial_message":"!touch /tmp/from-another-site"}'],
      ['POST', `/api/conversations/${id}/actions`, '{"action":{"type":"message","content":"hi"}}'],
      ['DELETE', `/api/conversations/${id}`, undefined],
    ] as const) {
      // A cross-site "simple" request: text/plain, no preflight.
      const res = await fetch(`${server.baseUrl}${path}`, {
        method,
        headers: { ...foreign, 'content-type': 'text/plain' },
        ...(body !== undefined && { body }),
      });
      expect({
        method,
        path,
        status: res.status,
        code: ((await res.json()) as { error: { code: string } }).error.code,
      }).toEqual({
        method,
        path,
        status: 403,
        code: 'FOREIGN_ORIGIN',
      });
    }
    // Nothing was created, stored or deleted.
    expect(await conversations()).toBe(before);
    const events = await http<{ items: Array<{ event: unknown }> }>(
      server.baseUrl,
      'GET',
      `/api/conversations/${id}/events`,
      undefined,
      ALICE,
    );
    expect(events.body.items.map((i) => JSON.stringify(i.event)).filter((e) => e.includes('"hi"'))).toEqual([]);
    // The handshake of another site's page: refused before it is upgraded. A raw `ws` socket, not the protocol
    // client: only it can set the Origin header and see the HTTP status of a refused handshake.
    const handshake = await new Promise<number>((resolve) => {
      const socket = new WebSocket(`${wsUrlFor(server.wsUrl, id)}&token=${ALICE}`, { origin: 'https://evil.example' });
      socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      socket.on('open', () => {
        socket.close();
        resolve(101);
      });
      socket.on('error', () => resolve(-1));
    });
    expect(handshake).toBe(403);
    // Its own origin (the page's) is welcome.
    const own = await fetch(`${server.baseUrl}/api/conversations/${id}/actions`, {
      method: 'POST',
      headers: { origin: server.baseUrl, authorization: `Bearer ${ALICE}`, 'content-type': 'application/json' },
      body: '{"action":{"type":"message","content":"from the page"}}',
    });
    expect(own.status).toBe(202);
  });

  it('does not check the Host with tokens: another name is served with a token and refused without one', async () => {
    const id = await create(ALICE);
    const host = `evil.example:${server.port}`;
    const get = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const req = request(`${server.baseUrl}/api/conversations`, { headers: { host, ...headers } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject).end();
      });
    expect([await get({ authorization: `Bearer ${ALICE}` }), await get({})]).toEqual([200, 401]);
    const handshake = await new Promise<number>((resolve) => {
      const socket = new WebSocket(`${wsUrlFor(server.wsUrl, id)}&token=${ALICE}`, { headers: { host } });
      socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      socket.on('upgrade', (res) => {
        socket.terminate();
        resolve(res.statusCode ?? 0);
      });
      socket.on('error', () => resolve(-1));
    });
    expect(handshake).toBe(101);
  });

  it('serves the page without a token, with a CSP of its own origin, and nothing else under /page/', async () => {
    for (const path of ['/', '/page/app.js', '/page/style.css']) {
      const res = await fetch(`${server.baseUrl}${path}`);
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
      expect(res.headers.get('content-security-policy')).toMatch(/default-src 'self'/);
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    }
    expect((await fetch(`${server.baseUrl}/`)).headers.get('content-type')).toMatch(/^text\/html/);
    for (const path of ['/page/index.ts', '/page/../package.json', '/page/%2e%2e/package.json', '/index.html'])
      expect((await fetch(`${server.baseUrl}${path}`)).status, path).toBe(404);
  });
});
