import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { embeddedNatsPid } from '../support/faults.ts';
import { createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  server = await e2e.start();
}, 60_000);

const reply = (events: LoggedEvent[], text: string) =>
  events.some((e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.data.content.includes(text));

describe('NATS going away', () => {
  it('says not ready while the embedded nats-server is down, starts it again on the same store, and goes on without losing anything', async () => {
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);
    const id = await createConversation(server.baseUrl, { initial_message: 'before the fault' });
    const before = await eventsWhen(
      server,
      id,
      'the answer before the fault',
      (events) => reply(events, 'before the fault'),
      30_000,
    );

    const pid = embeddedNatsPid(server.dataDir);
    expect(pid).toBeDefined();
    process.kill(pid!, 'SIGKILL');
    const statuses = new Set<number>();
    await until(
      async () => {
        const status = (await http(server.baseUrl, 'GET', '/readyz')).status;
        statuses.add(status);
        return statuses.has(503) && status === 200 ? true : undefined;
      },
      'readyz to go 503 then back to 200',
      SERVER_WAIT,
    );
    expect(embeddedNatsPid(server.dataDir)).not.toBe(pid);

    const sent = await http(server.baseUrl, 'POST', `/api/conversations/${id}/actions`, {
      action: { type: 'message', content: 'after the fault' },
    });
    expect(sent.status).toBe(202);
    const after = await eventsWhen(
      server,
      id,
      'the answer after the fault',
      (events) => reply(events, 'after the fault'),
      30_000,
    );
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.map((e) => e.event.id)).toEqual(after.map((_, i) => i));
    expect((await http(server.baseUrl, 'GET', '/healthz')).status).toBe(200);
  }, 60_000);
});
