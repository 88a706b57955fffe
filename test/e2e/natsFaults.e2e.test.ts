import { readFileSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allEvents,
  createConversation,
  eventually,
  http,
  startServer,
  type ServerProcess,
} from '../support/serverProcess.ts';

let server: ServerProcess;

beforeAll(async () => {
  server = await startServer();
}, 60_000);

afterAll(async () => {
  await server?.stop();
});

/** The embedded nats-server of this server: the one whose store is under its data dir. */
function natsPid(dataDir: string): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (cmdline[0]?.endsWith('nats-server') && cmdline.some((a) => a.startsWith(dataDir)) && state !== 'Z')
        return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

const reply = (events: Awaited<ReturnType<typeof allEvents>>, text: string) =>
  events.some((e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.data.content.includes(text));

describe('NATS going away', () => {
  it('says not ready while the embedded nats-server is down, starts it again on the same store, and goes on without losing anything', async () => {
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);
    const id = await createConversation(server.baseUrl, { initial_message: 'before the fault' });
    const before = await eventually(async () => {
      const events = await allEvents(server.baseUrl, id);
      return reply(events, 'before the fault') ? events : undefined;
    }, 'the answer before the fault');

    const pid = natsPid(server.dataDir);
    expect(pid).toBeDefined();
    process.kill(pid!, 'SIGKILL');
    const statuses = new Set<number>();
    await eventually(
      async () => {
        const status = (await http(server.baseUrl, 'GET', '/readyz')).status;
        statuses.add(status);
        return statuses.has(503) && status === 200 ? true : undefined;
      },
      'readyz to go 503 then back to 200',
      30_000,
    );
    expect(natsPid(server.dataDir)).not.toBe(pid);

    const sent = await http(server.baseUrl, 'POST', `/api/conversations/${id}/actions`, {
      action: { type: 'message', content: 'after the fault' },
    });
    expect(sent.status).toBe(202);
    const after = await eventually(async () => {
      const events = await allEvents(server.baseUrl, id);
      return reply(events, 'after the fault') ? events : undefined;
    }, 'the answer after the fault');
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.map((e) => e.event.id)).toEqual(after.map((_, i) => i));
    expect((await http(server.baseUrl, 'GET', '/healthz')).status).toBe(200);
  }, 60_000);
});
