import { afterEach, describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { ConversationPage } from '../../protocol/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryStores } from '../../src/store/index.ts';
import { createTether, type Tether } from '../../src/tether.ts';
import { http } from '../support/serverProcess.ts';

let tether: Tether | undefined;
afterEach(async () => {
  await tether?.close();
  tether = undefined;
});

describe('GET /api/conversations', () => {
  it('pages newest first with an opaque cursor, and refuses a limit over 1000 or a cursor it never gave', async () => {
    let ids = 0;
    let second = 0;
    tether = createTether({
      stores: memoryStores(),
      runtimes: memoryRuntimeProvider(),
      agent: scriptedAgent(),
      clock: () => new Date(Date.UTC(2026, 0, 1, 0, 0, second++)),
      newId: () => `conv${++ids}`,
      server: { authenticate: async (req) => req.headers.authorization?.replace('Bearer ', '') ?? 'ada' },
    });
    const { port } = await tether.listen(0, '127.0.0.1');
    const base = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 5; i++) expect((await http(base, 'POST', '/api/conversations', {})).status).toBe(201);

    const seen: string[] = [];
    let path = '/api/conversations?limit=2';
    for (;;) {
      const page = await http<ConversationPage>(base, 'GET', path);
      expect(page.status).toBe(200);
      expect(page.body.items.length).toBeLessThanOrEqual(2);
      for (const item of page.body.items) {
        expect(item).toMatchObject({ user: 'ada', state: expect.any(String), last_seq: expect.any(Number) });
        seen.push(item.conversation_id);
      }
      if (page.body.next_cursor === null) break;
      path = `/api/conversations?limit=2&cursor=${encodeURIComponent(page.body.next_cursor)}`;
    }
    expect(seen).toEqual(['conv5', 'conv4', 'conv3', 'conv2', 'conv1']);
    const all = await http<ConversationPage>(base, 'GET', '/api/conversations');
    expect(all.body).toMatchObject({ next_cursor: null });
    expect(all.body.items).toHaveLength(5);

    const tooMany = await http<{ error: { code: string; message: string } }>(
      base,
      'GET',
      '/api/conversations?limit=1001',
    );
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.error.message).toMatch(/limit is at most 1000/);
    const forged = await http<{ error: { message: string } }>(
      base,
      'GET',
      '/api/conversations?cursor=bm90LWEtY3Vyc29y',
    );
    expect(forged.status).toBe(400);
    expect(forged.body.error.message).toMatch(/cursor is not one this server gave/);
    const other = await http<ConversationPage>(base, 'GET', '/api/conversations', undefined, 'bob');
    expect(other.body).toEqual({ items: [], next_cursor: null });
  });
});
