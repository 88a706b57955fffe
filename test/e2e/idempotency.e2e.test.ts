import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';

interface ActResult {
  seq: number;
  duplicate: boolean;
}

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  server = await e2e.start();
}, 60_000);

const connect = (id: string, afterSeq?: number) => e2e.connect(server, id, { afterSeq });

function post(id: string, body: unknown) {
  return http<ActResult>(server.baseUrl, 'POST', `/api/conversations/${id}/actions`, body);
}

async function idleConversation(): Promise<{ id: string; events: LoggedEvent[] }> {
  const id = await createConversation(server.baseUrl);
  const events = await eventsWhen(server, id, 'the new conversation to await user input', endsAwaiting, 30_000);
  return { id, events };
}

const userEvents = (events: LoggedEvent[]) => events.filter((e) => e.event.source === 'user');

describe('actions retried with the same client_id', () => {
  it('stores a retried REST message once and answers the retry as a duplicate of the first', async () => {
    const { id } = await idleConversation();
    const body = { action: { type: 'message', content: 'only once' }, client_id: 'retry-message-1' };
    const first = await post(id, body);
    const retry = await post(id, body);
    expect(first.status).toBe(202);
    expect(first.body.duplicate).toBe(false);
    expect(retry.status).toBe(202);
    expect(retry.body).toEqual({ seq: first.body.seq, duplicate: true });

    const events = await allEvents(server.baseUrl, id);
    const stored = userEvents(events).filter((e) => e.event.type === 'message');
    expect(stored).toHaveLength(1);
    expect(stored[0]!.seq).toBe(first.body.seq);
  });

  it('stores a message once when a client resends it with the same client_id after reconnecting', async () => {
    const { id } = await idleConversation();
    const first = await connect(id);
    first.sendMessage('sent before the drop', 'retry-ws-1');
    await first.waitFor((f) => f.type === 'event' && f.event.source === 'user' && f.event.type === 'message', {
      what: 'the stored message',
    });
    const cursor = first.lastSeq();
    await first.terminate();

    const again = await connect(id, cursor);
    again.sendMessage('sent before the drop', 'retry-ws-1');
    again.sendMessage('a new message', 'retry-ws-2');
    await again.waitFor(
      (f) => f.type === 'event' && f.event.type === 'message' && f.event.data.content === 'a new message',
      {
        what: 'the new message',
      },
    );
    await again.roundTrip();
    const contents = userEvents(await allEvents(server.baseUrl, id)).flatMap((e) =>
      e.event.type === 'message' ? [e.event.data.content] : [],
    );
    expect(contents).toEqual(['sent before the drop', 'a new message']);
    expect(again.frames.filter((f) => f.type === 'error')).toEqual([]);
  });

  it('answers a retried state change as a duplicate, not as an illegal transition, after the state has moved on', async () => {
    const { id } = await idleConversation();
    const body = { action: { type: 'change_agent_state', state: 'stopped' }, client_id: 'retry-stop-1' };
    const first = await post(id, body);
    expect(first.status).toBe(202);
    // The retry of an action that was stored must get the same success, not an error.
    const retry = await post(id, body);
    expect({ status: retry.status, body: retry.body }).toEqual({
      status: 202,
      body: { seq: first.body.seq, duplicate: true },
    });
    const stops = userEvents(await allEvents(server.baseUrl, id)).filter((e) => e.event.type === 'change_agent_state');
    expect(stops).toHaveLength(1);
  });

  it('sends no error frame for a retried run action while the command it started is still running', async () => {
    const { id } = await idleConversation();
    const client = await connect(id);
    const run = { type: 'user_action', action: { type: 'run', command: 'sleep 2' }, client_id: 'retry-run-1' };
    client.send(run);
    await client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === 'running',
      {
        what: 'the command to start',
      },
    );
    client.send(run);
    // Actions of one connection are handled in order: once this one is stored, the retry has been answered.
    client.sendMessage('barrier', 'retry-run-barrier');
    await client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'message' && f.event.data.content === 'barrier',
      {
        what: 'the barrier message',
      },
    );
    await client.roundTrip();
    expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
    const commands = userEvents(await allEvents(server.baseUrl, id)).filter((e) => e.event.type === 'command');
    expect(commands).toHaveLength(1);
  });
});
