import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';
import { wsUrlFor, type Frame, type WsClient } from '../support/wsClient.ts';

const MAX_FRAME_BYTES = 4096;
const MAX_BODY_BYTES = 16_384;

type ErrorFrame = Extract<Frame, { type: 'error' }>;
interface ErrorBody {
  error: { code: string; message: string };
}

const e2e = useE2e();
let server: ServerProcess;
let conversationId: string;

beforeAll(async () => {
  server = await e2e.start({
    env: { TETHER_MAX_FRAME_BYTES: String(MAX_FRAME_BYTES), TETHER_MAX_BODY_BYTES: String(MAX_BODY_BYTES) },
  });
  conversationId = await createConversation(server.baseUrl);
  await idle(conversationId);
}, 60_000);

const connect = (id = conversationId) => e2e.connect(server, id);

/** The stored events once the agent waits for the user. */
const idle = (id: string) => eventsWhen(server, id, `conversation ${id} to await user input`, endsAwaiting, 30_000);

/** Sends something bad; returns the error frame it caused, after checking the connection still answers a ping. */
async function errorFor(client: WsClient, send: () => void): Promise<ErrorFrame> {
  const from = client.frames.length;
  send();
  const error = await client.waitFor<ErrorFrame>((f) => f.type === 'error', { from, what: 'an error frame' });
  expect(error.code).toMatch(/\S/);
  expect(error.message).toMatch(/\S/);
  await client.roundTrip();
  expect(client.isOpen).toBe(true);
  expect(client.closeInfo).toBeNull();
  return error;
}

describe('bad WebSocket frames', () => {
  it('answers malformed JSON with an error frame that says so, and keeps the connection open', async () => {
    const client = await connect();
    const error = await errorFor(client, () => client.send('{"type": "ping",'));
    expect(error.message).toMatch(/json/i);
    expect(client.invalid).toEqual([]);
  });

  it('answers JSON that is not an object with a type with an error frame', async () => {
    const client = await connect();
    for (const text of ['42', '[]', 'null', '{"kind":"ping"}', '{"type":7}']) {
      const error = await errorFor(client, () => client.send(text));
      expect(error.message, `for ${text}`).toMatch(/type/);
    }
  });

  it('answers an unknown frame type with an error frame naming that type', async () => {
    const client = await connect();
    const error = await errorFor(client, () => client.send({ type: 'bogus_frame' }));
    expect(error.message).toContain('bogus_frame');
  });

  it('answers a user_action whose message has no content with an error frame, and stores nothing', async () => {
    const client = await connect();
    const before = await allEvents(server.baseUrl, conversationId);

    const missing = await errorFor(client, () => client.send({ type: 'user_action', action: { type: 'message' } }));
    expect(missing.message).toMatch(/content/);
    const empty = await errorFor(client, () =>
      client.send({ type: 'user_action', action: { type: 'message', content: '' } }),
    );
    expect(empty.message).toMatch(/content/);
    const noAction = await errorFor(client, () => client.send({ type: 'user_action' }));
    expect(noAction.message).toMatch(/action/);
    const unknownAction = await errorFor(client, () => client.send({ type: 'user_action', action: { type: 'dance' } }));
    expect(unknownAction.message).toMatch(/type/);

    expect(await allEvents(server.baseUrl, conversationId)).toEqual(before);

    // The same connection still acts: a good message is stored after the bad ones.
    client.sendMessage('a valid message');
    const after = await until(
      async () => {
        const events = await allEvents(server.baseUrl, conversationId);
        return events.length > before.length && events;
      },
      'the valid message to be stored',
      SERVER_WAIT,
    );
    expect(after.slice(before.length).find((e) => e.event.source === 'user')?.event).toMatchObject({
      type: 'message',
      data: { content: 'a valid message' },
    });
    await idle(conversationId);
  });

  it('answers a state change the machine does not allow with an error frame, and stores nothing', async () => {
    const client = await connect();
    const before = await idle(conversationId);
    const error = await errorFor(client, () =>
      client.send({ type: 'user_action', action: { type: 'change_agent_state', state: 'paused' } }),
    );
    expect(error.message).toMatch(/paused/);
    expect(await allEvents(server.baseUrl, conversationId)).toEqual(before);
  });

  it('answers a binary frame with an error frame and keeps the connection open', async () => {
    const client = await connect();
    const error = await errorFor(client, () => client.sendBinary(Buffer.from(JSON.stringify({ type: 'ping' }))));
    expect(error.message).toMatch(/binary/i);
  });

  it('closes a connection to an unknown conversation with code 4004', async () => {
    for (const id of ['no-such-conversation', 'not.a.valid.id']) {
      const client = e2e.open(wsUrlFor(server.wsUrl, id));
      const closed = await client.closed;
      expect(closed.code, `for ${id}`).toBe(4004);
      expect(client.frames.filter((f) => f.type === 'sync' || f.type === 'event')).toEqual([]);
    }
    const noId = e2e.open(server.wsUrl);
    expect((await noId.closed).code).toBe(4004);
  });

  it('refuses a cursor that is not a non-negative integer: the connection closes without a sync', async () => {
    for (const cursor of ['abc', '-1', '1.5']) {
      const url = `${wsUrlFor(server.wsUrl, conversationId)}&after_seq=${encodeURIComponent(cursor)}`;
      const client = e2e.open(url);
      const closed = await client.closed;
      expect(closed.code, `after_seq=${cursor}`).toBeGreaterThanOrEqual(4000);
      expect(closed.code, `after_seq=${cursor}`).toBeLessThan(5000);
      expect(
        client.frames.filter((f) => f.type === 'sync' || f.type === 'event'),
        `after_seq=${cursor}`,
      ).toEqual([]);
    }
  });

  it('refuses the WebSocket handshake on a path other than /ws', async () => {
    const client = e2e.open(server.wsUrl.replace(/\/ws$/, '/socket'));
    await expect(client.opened).rejects.toThrow(/404/);
  });

  it('accepts a frame under the size limit and closes a connection that sends one over it with code 1009', async () => {
    const client = await connect();
    const before = await idle(conversationId);

    const small = 's'.repeat(MAX_FRAME_BYTES - 200);
    client.sendMessage(small);
    const withSmall = await until(
      async () => {
        const events = await allEvents(server.baseUrl, conversationId);
        return events.length > before.length && events;
      },
      'the message under the limit to be stored',
      SERVER_WAIT,
    );
    expect(withSmall.some((e) => e.event.type === 'message' && e.event.data.content === small)).toBe(true);
    const settled = await idle(conversationId);

    const big = 'b'.repeat(MAX_FRAME_BYTES + 100);
    client.sendMessage(big);
    const closed = await client.closed;
    expect(closed.code).toBe(1009);
    expect(await allEvents(server.baseUrl, conversationId)).toEqual(settled);
  });
});

describe('bad REST requests', () => {
  it('answers a malformed JSON body with 400 and a JSON error body', async () => {
    for (const path of ['/api/conversations', `/api/conversations/${conversationId}/actions`]) {
      const res = await http<ErrorBody>(server.baseUrl, 'POST', path, '{"initial_message": ');
      expect(res.status, path).toBe(400);
      expect(res.contentType, path).toMatch(/application\/json/);
      expect(res.body.error.code, path).toMatch(/\S/);
      expect(res.body.error.message, path).toMatch(/json/i);
    }
  });

  it('answers a body over the size limit with 413 and a JSON error body, and creates nothing', async () => {
    const listBefore = await http<{ items: unknown[] }>(server.baseUrl, 'GET', '/api/conversations');
    const res = await http<ErrorBody>(server.baseUrl, 'POST', '/api/conversations', {
      initial_message: 'x'.repeat(MAX_BODY_BYTES + 1_000),
    });
    expect(res.status).toBe(413);
    expect(res.contentType).toMatch(/application\/json/);
    expect(res.body.error.code).toMatch(/\S/);
    const listAfter = await http<{ items: unknown[] }>(server.baseUrl, 'GET', '/api/conversations');
    expect(listAfter.body.items).toHaveLength(listBefore.body.items.length);
  });

  it('answers a bad events query with 400 naming the parameter', async () => {
    for (const [query, name] of [
      ['after_seq=abc', 'after_seq'],
      ['after_seq=-1', 'after_seq'],
      ['limit=0', 'limit'],
    ] as const) {
      const res = await http<ErrorBody>(server.baseUrl, 'GET', `/api/conversations/${conversationId}/events?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.body.error.message, query).toContain(name);
    }
  });

  it('answers an unknown route with 404 and a JSON error body', async () => {
    const res = await http<ErrorBody>(server.baseUrl, 'GET', '/api/nothing-here');
    expect(res.status).toBe(404);
    expect(res.body.error.code).toMatch(/\S/);
  });

  it('answers an action without its content with 400 naming the field, and stores nothing', async () => {
    const before = await idle(conversationId);
    const res = await http<ErrorBody>(server.baseUrl, 'POST', `/api/conversations/${conversationId}/actions`, {
      action: { type: 'message' },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/content/);
    expect(await allEvents(server.baseUrl, conversationId)).toEqual(before);
  });

  it('answers 404 with a JSON error body for an unknown conversation on every route', async () => {
    const message = { action: { type: 'message', content: 'hello' } };
    const calls: Array<[string, string, unknown?]> = [
      ['GET', '/api/conversations/no-such-conversation'],
      ['GET', '/api/conversations/no-such-conversation/events'],
      ['POST', '/api/conversations/no-such-conversation/actions', message],
      ['POST', '/api/conversations/no-such-conversation/stop'],
      ['DELETE', '/api/conversations/no-such-conversation'],
    ];
    for (const [method, path, body] of calls) {
      const res = await http<ErrorBody>(server.baseUrl, method, path, body);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.contentType, `${method} ${path}`).toMatch(/application\/json/);
      expect(res.body.error.code, `${method} ${path}`).toMatch(/\S/);
    }
  });
});

describe('after all that', () => {
  it('is still healthy and serves a new conversation end to end', async () => {
    const health = await http(server.baseUrl, 'GET', '/healthz');
    expect(health.status).toBe(200);

    const id = await createConversation(server.baseUrl);
    const client = await connect(id);
    client.sendMessage('are you still there?');
    const reply = await client.waitFor(
      (f) => f.type === 'event' && f.event.source === 'agent' && f.event.type === 'message',
      { what: "the agent's reply" },
    );
    expect(reply).toMatchObject({ type: 'event', event: { conversation_id: id, source: 'agent', type: 'message' } });
    expect(client.invalid).toEqual([]);
  });
});
