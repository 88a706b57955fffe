import { describe, expect, it } from 'vitest';
import { ConversationInfo, type EventOf, type LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { endsAwaiting, expectDenseIds, repliesTo, stateOf, userMessage } from '../support/logQueries.ts';
import { describeLog } from '../support/faults.ts';
import { SERVER_WAIT, until } from '../support/until.ts';
import type { EventFrame, SyncFrame, WsClient } from '../support/wsClient.ts';

const e2e = useE2e();
const start = (env: Record<string, string>) => e2e.start({ env });
const connect = (server: ServerProcess, id: string) => e2e.connect(server, id);

interface ListedConversation {
  conversation_id: string;
  in_memory: boolean;
  state: string | null;
}

/** GET /api/conversations: does not load anything, so it can watch sessions leave and come back. */
async function listed(server: ServerProcess): Promise<Map<string, ListedConversation>> {
  const res = await http<{ items: ListedConversation[] }>(server.baseUrl, 'GET', '/api/conversations');
  expect(res.status).toBe(200);
  return new Map(res.body.items.map((item) => [item.conversation_id, item]));
}

async function inMemory(server: ServerProcess, id: string): Promise<boolean> {
  const entry = (await listed(server)).get(id);
  expect(entry, `conversation ${id} in the list`).toBeDefined();
  return entry!.in_memory;
}

/** Waits (without loading it) until the conversation has left memory. */
async function untilPassivated(server: ServerProcess, id: string, what: string): Promise<void> {
  await until(async () => !(await inMemory(server, id)), what, { ...SERVER_WAIT, timeoutMs: 15_000 });
}

const answered = (content: string) => (events: readonly LoggedEvent[]) =>
  repliesTo(events, content).length > 0 && endsAwaiting(events);

function passivations(events: readonly LoggedEvent[]): Array<LoggedEvent & { event: EventOf<'session_passivated'> }> {
  return events.filter(
    (e): e is LoggedEvent & { event: EventOf<'session_passivated'> } => e.event.type === 'session_passivated',
  );
}

function rehydrations(events: readonly LoggedEvent[]): Array<LoggedEvent & { event: EventOf<'session_rehydrated'> }> {
  return events.filter(
    (e): e is LoggedEvent & { event: EventOf<'session_rehydrated'> } => e.event.type === 'session_rehydrated',
  );
}

/**
 * The log of a conversation that just left memory: it ends with the runtime
 * stopped and `session_passivated {reason, state}`, and it left only once.
 */
function expectPassivatedLog(events: readonly LoggedEvent[], reason: string, state: string): void {
  const left = passivations(events);
  expect(
    left.map((e) => e.event.data),
    `session_passivated events in\n${describeLog(events)}`,
  ).toEqual([{ reason, state }]);
  expect(events.at(-1)?.event.type).toBe('session_passivated');
  const stopped = events.findLast((e) => e.event.type === 'runtime_status');
  expect(stopped?.event.data).toEqual({ status: 'stopped' });
  expect(stopped!.event.id).toBeLessThan(left[0]!.event.id);
  expectDenseIds(events);
}

/**
 * Reads a passivated conversation with GET /api/conversations/:id, which
 * leaves it out of memory and stores nothing, then brings it back with an
 * action and checks that it is whole again: it shows the agent state it left
 * in, it was restored from the snapshot written at passivation (nothing left
 * to fold), and the message is answered with ids that continue densely.
 */
async function expectComesBackIntact(
  server: ServerProcess,
  id: string,
  before: readonly LoggedEvent[],
  state: string,
): Promise<LoggedEvent[]> {
  const info = await http<ConversationInfo>(server.baseUrl, 'GET', `/api/conversations/${id}`);
  expect(info.status).toBe(200);
  ConversationInfo.parse(info.body);
  expect(info.body).toMatchObject({ conversation_id: id, in_memory: false, state });
  expect(info.body.last_seq).toBe(before.at(-1)!.seq);
  expect(await allEvents(server.baseUrl, id)).toEqual(before);
  expect(await inMemory(server, id)).toBe(false);

  const content = `back again ${id.slice(0, 6)}`;
  const sent = await http<{ seq: number; duplicate: boolean }>(
    server.baseUrl,
    'POST',
    `/api/conversations/${id}/actions`,
    {
      action: { type: 'message', content },
    },
  );
  expect(sent.status).toBe(202);
  expect(sent.body.duplicate).toBe(false);
  const after = await eventsWhen(server, id, `the answer to "${content}"`, answered(content));
  const rehydrated = after[before.length]?.event;
  expect(rehydrated?.type).toBe('session_rehydrated');
  expect(rehydrated?.data).toEqual({ from: 'snapshot', events_folded: 0 });
  const replies = repliesTo(after, content);
  expect(replies).toHaveLength(1);
  expect(after.slice(0, before.length)).toEqual(before);
  expect(rehydrations(after), 'brought back once').toHaveLength(1);
  expectDenseIds(after);
  // docs/events.md: `cause` is the id of the event an event answers.
  expect
    .soft(replies[0]!.event.cause, `cause of the answer to "${content}" in\n${describeLog(after)}`)
    .toBe(userMessage(after, content)!.event.id);
  return after;
}

describe('passivation: sessions leave memory and come back', () => {
  it('sends a session with no connection out of memory after the close delay, never while the agent works; a connection that only listens leaves it out, and its next action brings it back', async () => {
    const closeDelayMs = 500;
    const server = await start({ TETHER_CLOSE_DELAY_MS: String(closeDelayMs), TETHER_AGENT_DELAY_MS: '1500' });
    const id = await createConversation(server.baseUrl);
    const client = await connect(server, id);

    // Connected through a think time longer than the close delay, and idle for more than it: it stays.
    client.sendMessage('first');
    await eventsWhen(server, id, 'the answer to "first"', answered('first'));
    await new Promise((r) => setTimeout(r, 3 * closeDelayMs));
    expect(await inMemory(server, id)).toBe(true);
    expect(passivations(await allEvents(server.baseUrl, id))).toEqual([]);

    // The last client leaves while the agent is thinking: the session waits for the answer, then leaves.
    const from = client.frames.length;
    client.sendMessage('second');
    await client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === 'running',
      {
        from,
        what: 'the agent running on "second"',
      },
    );
    await client.close();
    await untilPassivated(server, id, 'the session to leave memory after the close delay');

    const before = await allEvents(server.baseUrl, id);
    expectPassivatedLog(before, 'close_delay', 'awaiting_user_input');
    const reply = repliesTo(before, 'second');
    expect(reply).toHaveLength(1);
    const left = passivations(before)[0]!;
    expect(reply[0]!.event.id).toBeLessThan(left.event.id);
    const idleSince = before.findLast((e) => e.event.id < left.event.id && e.event.type === 'agent_state_changed')!;
    expect(idleSince.event.data).toMatchObject({ state: 'awaiting_user_input' });
    expect(Date.parse(left.event.ts) - Date.parse(idleSince.event.ts)).toBeGreaterThanOrEqual(closeDelayMs);

    // The next connect only listens: it is told the state and the log's end, and nothing wakes.
    const again = await connect(server, id);
    const sync = again.frames[0] as SyncFrame;
    expect(sync).toMatchObject({
      type: 'sync',
      conversation_id: id,
      state: 'awaiting_user_input',
      through_seq: before.at(-1)!.seq,
    });
    await new Promise((r) => setTimeout(r, 3 * closeDelayMs));
    expect(await allEvents(server.baseUrl, id)).toEqual(before);
    expect(await inMemory(server, id)).toBe(false);

    // Its first action brings it back from its snapshot; the client sees that, and the answer.
    again.sendMessage('third');
    const rehydrated = await again.waitFor<EventFrame>(
      (f) => f.type === 'event' && f.event.type === 'session_rehydrated',
      {
        what: 'session_rehydrated',
      },
    );
    expect(rehydrated.seq).toBeGreaterThan(before.at(-1)!.seq);
    expect(rehydrated.event.id).toBe(before.length);
    expect(rehydrated.event.data).toEqual({ from: 'snapshot', events_folded: 0 });
    const after = await eventsWhen(server, id, 'the answer to "third"', answered('third'));
    expect(after.slice(0, before.length)).toEqual(before);
    expect(repliesTo(after, 'third')).toHaveLength(1);
    expectDenseIds(after);
    await again.waitUntil(() => again.lastSeq() >= after.at(-1)!.seq, { what: 'the answer on the socket' });
    expect(again.frames.filter((f) => f.type === 'error')).toEqual([]);
  }, 30_000);

  it("hibernates an idle session while its client stays connected, and answers that client's next action on the same socket as if nothing happened", async () => {
    const idleMs = 700;
    const server = await start({ TETHER_IDLE_MS: String(idleMs), TETHER_AGENT_DELAY_MS: '1500' });
    const id = await createConversation(server.baseUrl);
    const client = await connect(server, id);
    client.sendMessage('first');

    // The agent thinks for longer than the idle time: working sessions are never hibernated.
    const hibernated = await client.waitFor<EventFrame>(
      (f) => f.type === 'event' && f.event.type === 'session_passivated',
      { what: 'session_passivated on the socket' },
    );
    const before = await allEvents(server.baseUrl, id);
    const left = before.find((e) => e.seq === hibernated.seq)!;
    expect(left.event.data).toEqual({ reason: 'idle', state: 'awaiting_user_input' });
    const reply = repliesTo(before, 'first');
    expect(reply, describeLog(before)).toHaveLength(1);
    expect(reply[0]!.event.id).toBeLessThan(left.event.id);
    expect(before.at(-1)!.seq).toBe(hibernated.seq);
    expectPassivatedLog(before, 'idle', 'awaiting_user_input');
    expect(await inMemory(server, id)).toBe(false);

    // The socket is still open and served.
    expect(client.isOpen).toBe(true);
    expect(client.closeInfo).toBeNull();
    await client.roundTrip();

    // Its next action brings the session back and is answered on the same socket.
    const from = client.frames.length;
    client.sendMessage('second');
    await client.waitFor(
      (f) =>
        f.type === 'event' &&
        f.event.source === 'agent' &&
        f.event.type === 'message' &&
        f.event.data.content.includes('second'),
      { from, what: 'the answer to "second" on the socket' },
    );
    // Let it hibernate again so the log stops growing, then compare the socket with the log.
    const all = await eventsWhen(
      server,
      id,
      'a second hibernation',
      (e) => passivations(e).length === 2 && e.at(-1)!.event.type === 'session_passivated',
    );
    await client.waitUntil(() => client.lastSeq() >= all.at(-1)!.seq, { what: 'every event on the socket' });
    await client.roundTrip();

    expect(client.isOpen).toBe(true);
    expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
    expect(client.frames.filter((f) => f.type === 'sync')).toHaveLength(1);
    expect(client.invalid).toEqual([]);
    // One socket, every stored event exactly once, in order, no gap.
    expect(client.seqs()).toEqual(all.map((e) => e.seq));
    expect(client.events().map((f) => f.event)).toEqual(all.map((e) => e.event));

    expect(all.slice(0, before.length)).toEqual(before);
    expectDenseIds(all);
    const back = all[before.length]!.event;
    expect(back.type).toBe('session_rehydrated');
    expect(back.data).toEqual({ from: 'snapshot', events_folded: 0 });
    const second = userMessage(all, 'second')!;
    expect(second.event.id).toBeGreaterThan(back.id);
    // It came back in the state it left in, and the action was stored once and answered once.
    expect(stateOf(all.filter((e) => e.event.id < second.event.id))).toBe('awaiting_user_input');
    expect(
      all.filter((e) => e.event.type === 'message' && e.event.source === 'user' && e.event.data.content === 'second'),
    ).toHaveLength(1);
    expect(repliesTo(all, 'second')).toHaveLength(1);
    expect(passivations(all).map((e) => e.event.data)).toEqual([
      { reason: 'idle', state: 'awaiting_user_input' },
      { reason: 'idle', state: 'awaiting_user_input' },
    ]);
  }, 30_000);

  it('keeps at most TETHER_MAX_LIVE sessions in memory and sends the least recently used idle one out first', async () => {
    const server = await start({ TETHER_MAX_LIVE: '2' });
    const a = await createConversation(server.baseUrl);
    await eventsWhen(server, a, 'A ready', endsAwaiting);
    const b = await createConversation(server.baseUrl);
    await eventsWhen(server, b, 'B ready', endsAwaiting);
    // A was created first but used last: B is now the least recently used.
    const touched = await http(server.baseUrl, 'POST', `/api/conversations/${a}/actions`, {
      action: { type: 'message', content: 'touch A' },
    });
    expect(touched.status).toBe(202);
    await eventsWhen(server, a, 'the answer to "touch A"', answered('touch A'));
    const two = await listed(server);
    expect([two.get(a)?.in_memory, two.get(b)?.in_memory]).toEqual([true, true]);

    const c = await createConversation(server.baseUrl);
    await untilPassivated(server, b, 'B to leave memory when C arrives');
    const afterC = await listed(server);
    expect({ a: afterC.get(a)?.in_memory, b: afterC.get(b)?.in_memory, c: afterC.get(c)?.in_memory }).toEqual({
      a: true,
      b: false,
      c: true,
    });
    expect(afterC.get(b)?.state).toBe('awaiting_user_input');
    const bBefore = await allEvents(server.baseUrl, b);
    expectPassivatedLog(bBefore, 'capacity', 'awaiting_user_input');
    expect(passivations(await allEvents(server.baseUrl, a))).toEqual([]);
    expect(passivations(await allEvents(server.baseUrl, c))).toEqual([]);

    // Bringing B back makes three again: now A (used before C was created) is the least recently used.
    await expectComesBackIntact(server, b, bBefore, 'awaiting_user_input');
    await untilPassivated(server, a, 'A to leave memory when B comes back');
    const afterB = await listed(server);
    expect({ a: afterB.get(a)?.in_memory, b: afterB.get(b)?.in_memory, c: afterB.get(c)?.in_memory }).toEqual({
      a: false,
      b: true,
      c: true,
    });
    const aBefore = await allEvents(server.baseUrl, a);
    expectPassivatedLog(aBefore, 'capacity', 'awaiting_user_input');
    expect(passivations(await allEvents(server.baseUrl, c))).toEqual([]);
    expect(passivations(await allEvents(server.baseUrl, b))).toHaveLength(1);
  }, 30_000);

  it('passivates the oldest running conversation of a user who starts one too many, tells its clients, and leaves the others alone', async () => {
    const server = await start({ TETHER_MAX_RUNNING_PER_USER: '2', TETHER_AGENT_DELAY_MS: '2500' });
    // Created in this order; they start running in another order, so "oldest" means oldest running.
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await createConversation(server.baseUrl));
    const [third, oldest, second, bystander] = ids as [string, string, string, string];
    for (const id of ids) await eventsWhen(server, id, `${id} ready`, endsAwaiting);
    const clients = new Map<string, WsClient>();
    for (const id of ids) clients.set(id, await connect(server, id));
    const runs = async (id: string, content: string) => {
      const client = clients.get(id)!;
      const from = client.frames.length;
      client.sendMessage(content);
      await client.waitFor(
        (f) => f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === 'running',
        {
          from,
          what: `${id} running`,
        },
      );
    };

    await runs(oldest, 'task 1');
    await runs(second, 'task 2');
    await runs(third, 'task 3');

    const victimClient = clients.get(oldest)!;
    const status = await victimClient.waitFor((f) => f.type === 'status' && f.level === 'error', {
      what: 'the error status frame',
    });
    expect(status).toMatchObject({ type: 'status', level: 'error', id: 'AGENT_ERROR$TOO_MANY_CONVERSATIONS' });
    expect((status as { message: string }).message.length).toBeGreaterThan(0);
    await untilPassivated(server, oldest, 'the oldest running conversation to leave memory');
    const before = await allEvents(server.baseUrl, oldest);
    expectPassivatedLog(before, 'too_many_running', 'running');
    expect(repliesTo(before, 'task 1')).toEqual([]);

    // The other two running ones finish their task in memory; the idle one is untouched.
    for (const [id, content] of [
      [second, 'task 2'],
      [third, 'task 3'],
    ] as const) {
      const events = await eventsWhen(server, id, `the answer to "${content}"`, answered(content));
      expect(passivations(events)).toEqual([]);
      expect(repliesTo(events, content)).toHaveLength(1);
    }
    const now = await listed(server);
    expect([oldest, second, third, bystander].map((id) => now.get(id)?.in_memory)).toEqual([false, true, true, true]);
    expect(passivations(await allEvents(server.baseUrl, bystander))).toEqual([]);
    for (const id of [second, third, bystander]) {
      const client = clients.get(id)!;
      await client.roundTrip();
      expect(
        client.frames.filter((f) => f.type === 'status' && f.id === 'AGENT_ERROR$TOO_MANY_CONVERSATIONS'),
        id,
      ).toEqual([]);
    }
    expect(
      victimClient.frames.filter((f) => f.type === 'status' && f.id === 'AGENT_ERROR$TOO_MANY_CONVERSATIONS'),
    ).toHaveLength(1);

    // Back in memory it is running again and finishes the task it was sent away from, then chats on.
    const after = await expectComesBackIntact(server, oldest, before, 'running');
    const taskAnswer = repliesTo(after, 'task 1');
    expect(taskAnswer).toHaveLength(1);
    expect
      .soft(taskAnswer[0]!.event.cause, `cause of the answer to "task 1" in\n${describeLog(after)}`)
      .toBe(userMessage(after, 'task 1')!.event.id);
    expect(userMessage(after, 'task 1')!.event.id).toBeLessThan(passivations(after)[0]!.event.id);
    // Its client, connected all along, saw it come back and got the answers.
    await victimClient.waitUntil(() => victimClient.lastSeq() >= after.at(-1)!.seq, {
      what: 'the answers on the victim socket',
    });
    expect(victimClient.seqs()).toEqual(after.map((e) => e.seq));
  }, 40_000);
});
