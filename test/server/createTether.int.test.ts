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

  it('refuses a repository with credentials in its URL, a token_secret that names no secret, and file URLs unless allowed', async () => {
    const start = async (server: { authenticate?: () => Promise<string>; fileRepositories?: boolean }) => {
      await tether?.close();
      tether = createTether({
        stores: memoryStores(),
        runtimes: memoryRuntimeProvider(),
        agent: scriptedAgent(),
        server,
      });
      const { port } = await tether.listen(0, '127.0.0.1');
      return (repository: Record<string, string>, secrets: Record<string, string> = {}) =>
        http<{ error?: { code: string; message: string } }>(`http://127.0.0.1:${port}`, 'POST', '/api/conversations', {
          repository,
          secrets,
        });
    };
    const withTokens = await start({ authenticate: async () => 'ada' });
    const refused = [
      [{ url: 'https://ada:ghp_x@github.com/a/b.git' }, /holds credentials/],
      [{ url: 'https://ada@github.com/a/b.git' }, /holds credentials/],
      [{ url: 'git@github.com:a/b.git' }, /not a URL/],
      [{ url: 'ftp://example.com/a.git' }, /ftp: URLs are not cloned/],
      [{ url: 'https://github.com/a/b.git', token_secret: 'GH' }, /names no secret of this conversation \(GH\)/],
      [{ url: 'file:///srv/repo.git' }, /file URLs are cloned only by a server without tokens/],
    ] as const;
    for (const [repository, message] of refused) {
      const answer = await withTokens(repository);
      expect(answer.status, repository.url).toBe(400);
      expect(answer.body.error?.message).toMatch(message);
    }
    expect(
      (await withTokens({ url: 'https://github.com/a/b.git', token_secret: 'GH' }, { GH: 'ghp_1234' })).status,
    ).toBe(201);
    expect((await withTokens({ url: 'ssh://git@github.com/a/b.git' })).status).toBe(201);
    // One user (no tokens), or an operator who allows them: file URLs are cloned.
    expect((await (await start({}))({ url: 'file:///srv/repo.git' })).status).toBe(201);
    const allowed = await start({ authenticate: async () => 'ada', fileRepositories: true });
    expect((await allowed({ url: 'file:///srv/repo.git' })).status).toBe(201);
  });
});
