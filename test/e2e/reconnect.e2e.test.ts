import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { wsUrlFor, type SyncFrame, type WsClient } from '../support/wsClient.ts';

const IDLE_STATES = ['awaiting_user_input', 'finished'];
const ROUNDS = 5;

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  server = await e2e.start();
}, 60_000);

const open = (conversationId: string, afterSeq?: number) => e2e.open(wsUrlFor(server.wsUrl, conversationId, afterSeq));

/** A client once its socket is open (not waiting for the sync frame). */
async function connect(conversationId: string, afterSeq?: number): Promise<WsClient> {
  const client = open(conversationId, afterSeq);
  await client.opened;
  return client;
}

/** Waits until every user message sent is stored and the agent is idle after the last one. */
async function settled(conversationId: string, userMessages: number): Promise<LoggedEvent[]> {
  return eventsWhen(
    server,
    conversationId,
    `${userMessages} user messages stored and the agent idle`,
    (events) => {
      const stored = events.filter((e) => e.event.source === 'user' && e.event.type === 'message').length;
      const last = events.at(-1)?.event;
      const idle = last?.type === 'agent_state_changed' && IDLE_STATES.includes(last.data.state);
      return stored === userMessages && idle;
    },
    90_000,
  );
}

function syncOf(client: WsClient): SyncFrame {
  const first = client.frames[0];
  expect(first?.type, `first frame on ${client.url}`).toBe('sync');
  return first as SyncFrame;
}

describe('reconnecting with a cursor', () => {
  it('gives a client that drops and reconnects with its last seq every event exactly once and in order, while events keep flowing', async () => {
    const id = await createConversation(server.baseUrl, { max_iterations: 10_000 });
    const a = await connect(id);
    const bConnections: Array<{ client: WsClient; cursor: number | undefined }> = [
      { client: await connect(id), cursor: undefined },
    ];
    const c = await connect(id);

    const sent: string[] = [];
    const produce = (count = 1) => {
      for (let i = 0; i < count; i++) {
        const n = sent.length;
        // Every fifth message runs a command, so command and command_output events are in the mix.
        const content = n % 5 === 4 ? `!echo tick-${n}` : `msg-${n}`;
        sent.push(content);
        c.sendMessage(content, `m-${n}`);
      }
    };
    const producer = setInterval(produce, 20);
    let fresh: WsClient | undefined;
    try {
      await a.waitUntil(() => a.events().length >= 20, { what: '20 events on A' });
      for (let round = 0; round < ROUNDS; round++) {
        const b = bConnections.at(-1)!.client;
        // B must have taken live events on this connection (past its sync) before it drops.
        await b.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
        const through = syncOf(b).through_seq;
        await b.waitUntil(() => b.seqs().filter((s) => s > through).length >= 3, { what: 'live events on B' });
        await b.terminate();

        const cursor = lastSeenByB(bConnections);
        // Events keep flowing while B is away.
        await a.waitUntil(() => a.lastSeq() >= cursor + 40, { what: 'events produced while B is away' });
        if (round === ROUNDS - 1) {
          // A long history by the last round, so a client starting from nothing reads it in several pages.
          await a.waitUntil(() => a.events().length >= 1_200, { what: '1200 events on A', timeoutMs: 60_000 });
        }

        // ...and while it reconnects.
        produce(5);
        const next = open(id, cursor);
        produce(5);
        if (round === ROUNDS - 1) fresh = open(id);
        await next.opened;
        produce(3);
        bConnections.push({ client: next, cursor });
      }
      const last = bConnections.at(-1)!.client;
      const through = await last.waitFor((f) => f.type === 'sync').then((f) => (f as SyncFrame).through_seq);
      await last.waitUntil(() => last.seqs().filter((s) => s > through).length >= 3, {
        what: 'live events on the last B',
      });
    } finally {
      clearInterval(producer);
    }

    const rest = await settled(id, sent.length);
    const finalSeq = rest.at(-1)!.seq;
    const lastB = bConnections.at(-1)!.client;
    for (const client of [a, lastB, fresh!]) {
      await client.waitUntil(() => client.lastSeq() >= finalSeq, { what: `seq ${finalSeq}`, timeoutMs: 60_000 });
      // The pong comes after anything the server had queued for this client: late duplicates would show.
      await client.roundTrip();
    }
    // Nothing more happens once the agent is idle.
    expect(await allEvents(server.baseUrl, id)).toEqual(rest);
    const info = await http<{ state: string; last_seq: number }>(server.baseUrl, 'GET', `/api/conversations/${id}`);
    expect(info.body).toMatchObject({
      state: (rest.at(-1)!.event.data as { state: string }).state,
      last_seq: finalSeq,
    });

    const restSeqs = rest.map((e) => e.seq);
    // The log: dense ids from 0, strictly increasing seqs, every message stored once and in the order sent.
    expect(rest.map((e) => e.event.id)).toEqual(rest.map((_, i) => i));
    expect(restSeqs.every((s, i) => i === 0 || s > restSeqs[i - 1]!)).toBe(true);
    expect(rest.every((e) => e.event.conversation_id === id)).toBe(true);
    const storedMessages = rest.flatMap((e) =>
      e.event.source === 'user' && e.event.type === 'message' ? [e.event.data.content] : [],
    );
    expect(storedMessages).toEqual(sent);
    expect(rest.some((e) => e.event.type === 'command_output')).toBe(true);
    // Paging through REST in small pages gives the same list.
    expect(await allEvents(server.baseUrl, id, 7)).toEqual(rest);

    // A, connected throughout: every event exactly once, in order, byte-for-byte the stored event.
    expect(syncOf(a)).toMatchObject({ type: 'sync', conversation_id: id });
    expect(a.seqs()).toEqual(restSeqs);
    expect(a.events().map((f) => f.event)).toEqual(rest.map((e) => e.event));
    // The same bytes in REST and in ws frames, live or replayed (key order included).
    const restBytes = rest.map((e) => JSON.stringify(e.event));
    expect(a.events().map((f) => JSON.stringify(f.event))).toEqual(restBytes);
    expect(fresh!.events().map((f) => JSON.stringify(f.event))).toEqual(restBytes);

    // B across its connections: no duplicate, no gap.
    expect(bConnections).toHaveLength(ROUNDS + 1);
    const bSeqs: number[] = [];
    for (const [index, { client, cursor }] of bConnections.entries()) {
      const sync = syncOf(client);
      expect(sync.conversation_id).toBe(id);
      expect(
        client.frames.slice(1).some((f) => f.type === 'sync'),
        `a second sync on B#${index}`,
      ).toBe(false);
      if (cursor !== undefined) {
        expect(sync.through_seq).toBeGreaterThanOrEqual(cursor);
        expect(client.seqs()[0], `B#${index}'s first seq after cursor ${cursor}`).toBe(
          restSeqs[restSeqs.indexOf(cursor) + 1],
        );
        // Both paths were taken on this connection: history up to the sync, live after it.
        expect(
          client.seqs().some((s) => s <= sync.through_seq),
          `history on B#${index}`,
        ).toBe(true);
        expect(
          client.seqs().some((s) => s > sync.through_seq),
          `live events on B#${index}`,
        ).toBe(true);
      }
      bSeqs.push(...client.seqs());
    }
    expect(bSeqs).toEqual(restSeqs);
    expect(bConnections.flatMap(({ client }) => client.events().map((f) => f.event))).toEqual(rest.map((e) => e.event));

    // A client that joined from nothing in the middle of the traffic got the whole history too.
    expect(syncOf(fresh!).conversation_id).toBe(id);
    expect(fresh!.seqs()).toEqual(restSeqs);

    for (const client of [a, c, fresh!, ...bConnections.map((b) => b.client)]) {
      expect(client.invalid, `frames off the protocol on ${client.url}`).toEqual([]);
      expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
    }
  }, 240_000);

  it('acts on frames a client sends as soon as its socket opens, and still sends the sync first', async () => {
    const id = await createConversation(server.baseUrl);
    const client = open(id);
    await client.opened;
    client.send({ type: 'ping' });
    client.sendMessage('sent at once');
    await client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'message' && f.event.data.content === 'sent at once',
      {
        what: 'the message sent at once',
      },
    );
    expect(client.frames[0]?.type).toBe('sync');
    expect(client.frames.filter((f) => f.type === 'pong')).toHaveLength(1);
    expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
  });

  it('replays exactly the events after the cursor, then goes live', async () => {
    const id = await createConversation(server.baseUrl, { initial_message: 'first' });
    const first = await settled(id, 1);
    const middle = first[Math.floor(first.length / 2)]!.seq;

    const client = await connect(id, middle);
    const expectedHistory = first.filter((e) => e.seq > middle);
    await client.waitUntil(() => client.events().length >= expectedHistory.length, {
      what: 'the history after the cursor',
    });
    const sync = syncOf(client);
    expect(sync).toMatchObject({ conversation_id: id, through_seq: first.at(-1)!.seq, state: 'awaiting_user_input' });
    expect(client.events().map((f) => ({ seq: f.seq, event: f.event }))).toEqual(expectedHistory);

    client.sendMessage('second');
    const all = await settled(id, 2);
    await client.waitUntil(() => client.lastSeq() >= all.at(-1)!.seq, { what: 'the live events' });
    await client.roundTrip();
    expect(client.seqs()).toEqual(all.filter((e) => e.seq > middle).map((e) => e.seq));
  }, 60_000);

  it('sends only the sync frame to a client whose cursor is already at the end, and then new events', async () => {
    const id = await createConversation(server.baseUrl, {});
    const before = await eventsWhen(server, id, 'the conversation to be ready', endsAwaiting, 30_000);
    const end = before.at(-1)!.seq;

    const client = await connect(id, end);
    await client.roundTrip();
    expect(client.frames.map((f) => f.type)).toEqual(['sync', 'pong']);
    expect(syncOf(client).through_seq).toBe(end);

    client.sendMessage('hello');
    const after = await settled(id, 1);
    await client.waitUntil(() => client.lastSeq() >= after.at(-1)!.seq, { what: 'the new events' });
    await client.roundTrip();
    expect(client.seqs()).toEqual(after.filter((e) => e.seq > end).map((e) => e.seq));
  }, 60_000);
});

/** The last seq B saw over all its connections so far. */
function lastSeenByB(connections: Array<{ client: WsClient; cursor: number | undefined }>): number {
  let seen = 0;
  for (const { client, cursor } of connections) seen = Math.max(seen, cursor ?? 0, client.lastSeq(0));
  return seen;
}
