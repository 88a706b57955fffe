import { beforeAll, describe, expect, it } from 'vitest';
import { ConversationInfo, type LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting, repliesTo } from '../support/logQueries.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';
import type { WsClient } from '../support/wsClient.ts';

const CLOSE_DELAY_MS = 300;
const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  server = await e2e.start({ env: { TETHER_CLOSE_DELAY_MS: String(CLOSE_DELAY_MS) } });
}, 60_000);

interface Listed {
  conversation_id: string;
  in_memory: boolean;
  state: string;
  last_seq: number;
}

async function listed(id: string): Promise<Listed | undefined> {
  const res = await http<{ items: Listed[] }>(server.baseUrl, 'GET', '/api/conversations');
  expect(res.status).toBe(200);
  return res.body.items.find((item) => item.conversation_id === id);
}

async function info(id: string): Promise<ConversationInfo> {
  const res = await http<ConversationInfo>(server.baseUrl, 'GET', `/api/conversations/${id}`);
  expect(res.status).toBe(200);
  return ConversationInfo.parse(res.body);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('reads never wake a conversation', () => {
  it('a passivated conversation read over REST and followed by listening sockets stores nothing and stays out of memory; an action brings it back and is answered', async () => {
    const id = await createConversation(server.baseUrl, { initial_message: 'hello' });
    await until(
      async () => (repliesTo(await allEvents(server.baseUrl, id), 'hello').length ? true : undefined),
      'the answer',
      SERVER_WAIT,
    );
    await until(async () => ((await listed(id))?.in_memory === false ? true : undefined), 'passivation', SERVER_WAIT);
    const before = await allEvents(server.baseUrl, id);
    expect(before.at(-1)?.event.type).toBe('session_passivated');
    const lastSeq = before.at(-1)!.seq;

    // Reads of every kind, and two sockets that only listen, held for ten close delays.
    const whole = await e2e.connect(server, id);
    const tail = await e2e.connect(server, id, { afterSeq: before.at(-3)!.seq });
    for (let i = 0; i < 10; i++) {
      expect(await info(id)).toMatchObject({
        conversation_id: id,
        in_memory: false,
        state: 'awaiting_user_input',
        runtime_status: 'stopped',
        last_seq: lastSeq,
      });
      expect(await allEvents(server.baseUrl, id, 2)).toEqual(before);
      expect(await listed(id)).toMatchObject({ in_memory: false, state: 'awaiting_user_input', last_seq: lastSeq });
      await sleep(CLOSE_DELAY_MS);
    }
    expect(whole.frames[0]).toMatchObject({ type: 'sync', through_seq: lastSeq, state: 'awaiting_user_input' });
    const asLogged = (client: WsClient): LoggedEvent[] => client.events().map((f) => ({ seq: f.seq, event: f.event }));
    expect(asLogged(whole)).toEqual(before);
    expect(asLogged(tail)).toEqual(before.slice(-2));
    expect(await allEvents(server.baseUrl, id)).toEqual(before);

    // An action brings it back, and is answered: over REST, and live on both sockets.
    const sent = await http<{ seq: number }>(server.baseUrl, 'POST', `/api/conversations/${id}/actions`, {
      action: { type: 'message', content: 'are you there?' },
    });
    expect(sent.status).toBe(202);
    const after = await eventsWhen(
      server,
      id,
      'the answer to the action',
      (events) => repliesTo(events, 'are you there?').length === 1 && endsAwaiting(events),
      30_000,
    );
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after[before.length]?.event).toMatchObject({ type: 'session_rehydrated', data: { from: 'snapshot' } });
    for (const client of [whole, tail]) {
      await client.waitUntil(() => client.lastSeq() >= after.at(-1)!.seq, { what: 'the answer on the socket' });
    }
    expect(asLogged(whole)).toEqual(after);
    expect(asLogged(tail)).toEqual(after.slice(before.length - 2));
  }, 60_000);
});
