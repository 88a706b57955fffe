import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { deltasOf, expectStreamedOnce } from '../support/deltaChecks.ts';
import { useE2e } from '../support/e2e.ts';
import { startLlmNodes } from '../support/llmNodes.ts';
import { stateOf } from '../support/logQueries.ts';
import { failure, streamed, type FakeLlmServer } from '../support/fakeLlmServer.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import type { Frame, WsClient } from '../support/wsClient.ts';

// Two `tether serve` processes on one nats-server with the LLM agent streaming
// from a fake OpenAI-compatible server: every attempt of a step (after a rate
// limit, a failing server, a cut stream, its owner killed) is stored before
// its deltas, and a client sees the final attempt's deltas once, in order,
// then the stored answer equal to them joined.
const e2e = useE2e();
let llm: FakeLlmServer;
let a: ServerProcess;
let b: ServerProcess;

beforeAll(async () => {
  ({ llm, a, b } = await startLlmNodes(e2e));
}, 60_000);

type AgentAnswer = Extract<StoredEvent, { type: 'message' | 'command' | 'finish' }>;

/** A conversation on A (its owner) with a client on B; the message is sent once the client listens. */
async function conversation(): Promise<{ id: string; client: WsClient }> {
  const id = await createConversation(a.baseUrl);
  const client = await e2e.connect(b, id);
  return { id, client };
}

async function stored(client: WsClient): Promise<AgentAnswer> {
  const frame = await client.waitFor<Extract<Frame, { type: 'event' }>>(
    (f) => f.type === 'event' && f.event.source === 'agent' && ['message', 'command', 'finish'].includes(f.event.type),
    { what: 'the stored answer', timeoutMs: 20_000 },
  );
  return frame.event as AgentAnswer;
}

const attempts = (events: LoggedEvent[]) =>
  events
    .map((e) => e.event)
    .filter((e): e is Extract<StoredEvent, { type: 'agent_attempt' }> => e.type === 'agent_attempt');

describe('streamed LLM replies', () => {
  it('go to a client of another node as deltas, then the stored message equal to them joined', async () => {
    const { id, client } = await conversation();
    llm.enqueue(streamed(['Hel', 'lo', ', wor', 'ld', '!'], { gapMs: 20 }));
    client.sendMessage('hi');
    const answer = await stored(client);
    expect(answer).toMatchObject({ type: 'message', data: { content: 'Hello, world!', attempt: 1, deltas: 5 } });
    expectStreamedOnce(client.frames, answer.data.item_id!);
    expect(attempts(await allEvents(a.baseUrl, id))).toEqual([]);
    expect(llm.requests.at(-1)!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  }, 30_000);

  for (const when of ['before the first token', 'mid-stream'] as const) {
    it(`end as attempt 2 after a rate limit ${when}, with the attempt stored before its deltas`, async () => {
      const { id, client } = await conversation();
      llm.enqueue(
        when === 'before the first token'
          ? failure(429, { 'retry-after-ms': '100' })
          : streamed(['one ', 'two ', 'three'], { gapMs: 10, rateLimitAfter: 2 }),
        streamed(['second ', 'try'], { gapMs: 10 }),
      );
      client.sendMessage('hi');
      const answer = await stored(client);
      expect(answer.data).toMatchObject({ content: 'second try', attempt: 2, deltas: 2 });
      expectStreamedOnce(client.frames, answer.data.item_id!);
      const log = await allEvents(a.baseUrl, id);
      expect(attempts(log)).toMatchObject([
        { data: { item_id: answer.data.item_id, attempt: 2, reason: 'rate_limited' } },
      ]);
      const attemptSeq = log.find((e) => e.event.type === 'agent_attempt')!.seq;
      // The client got the second attempt's deltas after the stored attempt; mid-stream, the first one's before it.
      const firstOfSecond = client.frames.findIndex((f) => f.type === 'delta' && f.attempt === 2);
      const attemptAt = client.frames.findIndex((f) => f.type === 'event' && f.seq === attemptSeq);
      expect(attemptAt).toBeGreaterThanOrEqual(0);
      expect(firstOfSecond).toBeGreaterThan(attemptAt);
      const firstAttempt = deltasOf(client.frames).filter((d) => d.attempt === 1);
      expect(firstAttempt.map((d) => d.text)).toEqual(when === 'mid-stream' ? ['one ', 'two '] : []);
    }, 30_000);
  }

  it('try a cut stream again, and stop in error with a reason once a failing server used up the attempts', async () => {
    const { id, client } = await conversation();
    llm.enqueue(streamed(['cut ', 'here'], { gapMs: 10, cutAfter: 1 }), streamed(['whole'], {}));
    client.sendMessage('hi');
    const answer = await stored(client);
    expect(answer.data).toMatchObject({ content: 'whole', attempt: 2 });
    expect(attempts(await allEvents(a.baseUrl, id))).toMatchObject([{ data: { reason: 'stream_cut' } }]);

    const before = llm.requests.length;
    llm.enqueue(failure(503), failure(503), failure(503));
    client.sendMessage('again');
    const log = await eventsWhen(a, id, 'the agent in error', (events) => stateOf(events) === 'error', 20_000);
    const fact = log.at(-1)!.event as Extract<StoredEvent, { type: 'agent_state_changed' }>;
    expect(fact.data.reason).toMatch(/gave up after 3 attempts \(at most 3\).*503/);
    expect(llm.requests.length - before).toBe(3);
    expect(
      attempts(log)
        .slice(-2)
        .map((e) => [e.data.attempt, e.data.reason]),
    ).toEqual([
      [2, 'server_error'],
      [3, 'server_error'],
    ]);
  }, 30_000);

  it('ask the step again in a fork cut between an attempt and its answer', async () => {
    const { id, client } = await conversation();
    llm.enqueue(streamed(['cut'], { cutAfter: 1 }), { hang: true });
    client.sendMessage('hi');
    const log = await eventsWhen(a, id, 'the second attempt', (events) => attempts(events).length === 1, 20_000);
    const attempt = log.find((e) => e.event.type === 'agent_attempt')!;
    llm.enqueue(streamed(['in ', 'the ', 'fork'], { gapMs: 5 }));
    const forked = await http<{ conversation_id: string }>(a.baseUrl, 'POST', `/api/conversations/${id}/fork`, {
      at_seq: attempt.seq,
    });
    expect(forked.status).toBe(201);
    const fork = forked.body.conversation_id;
    const forkLog = await eventsWhen(
      a,
      fork,
      'the answer in the fork',
      (events) => events.some((e) => e.event.source === 'agent' && e.event.type === 'message'),
      20_000,
    );
    const item = (attempt.event as Extract<StoredEvent, { type: 'agent_attempt' }>).data.item_id;
    expect(attempts(forkLog).at(-1)).toMatchObject({ data: { item_id: item, attempt: 3, reason: 'forked' } });
    expect(forkLog.find((e) => e.event.type === 'message' && e.event.source === 'agent')!.event.data).toMatchObject({
      content: 'in the fork',
      item_id: item,
      attempt: 3,
    });
    // The parent's attempt still hangs: deleted, so that no node takes it over later and asks the LLM again.
    expect((await http(a.baseUrl, 'DELETE', `/api/conversations/${id}`)).status).toBe(204);
  }, 30_000);

  // Last: it kills node A.
  it('complete on the surviving node as a later attempt, stored once, when the owner is killed mid-stream', async () => {
    const { id, client } = await conversation();
    const words = Array.from({ length: 40 }, (_, i) => `w${i} `);
    llm.enqueue(streamed(words, { gapMs: 60 }), streamed(['after ', 'the ', 'failover'], { gapMs: 10 }));
    client.sendMessage('hi');
    await client.waitUntil(() => deltasOf(client.frames).length >= 5, { what: 'five deltas' });
    a.kill('SIGKILL');
    const answer = await stored(client);
    expect(answer.data).toMatchObject({ content: 'after the failover', attempt: 2, deltas: 3 });
    expectStreamedOnce(client.frames, answer.data.item_id!);
    expect(deltasOf(client.frames).filter((d) => d.attempt === 1).length).toBeGreaterThanOrEqual(5);
    const log = await allEvents(b.baseUrl, id);
    expect(attempts(log)).toMatchObject([{ data: { attempt: 2, reason: 'owner_lost' } }]);
    const answers = log.filter((e) => e.event.source === 'agent' && e.event.type === 'message');
    expect(answers).toHaveLength(1);
  }, 40_000);
});
