import { beforeAll, describe, expect, it } from 'vitest';
import type { ConversationInfo, LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting, repliesTo } from '../support/logQueries.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';
import type { EventFrame, WsClient } from '../support/wsClient.ts';

// Two `tether serve` processes on one nats-server: a client of either sees a
// conversation's events live, whichever process runs it, because each process
// follows the log once instead of pushing from the writer's memory.
const e2e = useE2e();
let a: ServerProcess;
let b: ServerProcess;

beforeAll(async () => {
  const nats = await e2e.nats();
  [a, b] = await Promise.all([e2e.start({ env: { NATS_URL: nats.url } }), e2e.start({ env: { NATS_URL: nats.url } })]);
}, 60_000);

const listen = (server: ServerProcess, id: string) => e2e.connect(server, id, { keepRaw: true });

const asLogged = (f: EventFrame): LoggedEvent => ({ seq: f.seq, event: f.event });
const eventTexts = (client: WsClient) => client.raw.filter((text) => text.startsWith('{"type":"event"'));

describe('two tether serve processes on one NATS', () => {
  it("a client of the other process sees every event of a conversation driven through the first, live, once, in order and byte-equal to the first's frames", async () => {
    const id = await createConversation(a.baseUrl);
    const onA = await listen(a, id);
    const onB = await listen(b, id);
    const joinedAt = (onB.frames[0] as { through_seq: number }).through_seq;

    // Driven through A over its socket: messages, and a command with output.
    for (const content of ['one', 'two', 'three']) {
      onA.sendMessage(content);
      await until(
        async () => (repliesTo(await allEvents(a.baseUrl, id), content).length === 1 ? true : undefined),
        `the answer to "${content}"`,
        SERVER_WAIT,
      );
    }
    onA.send({ type: 'user_action', action: { type: 'run', command: 'seq 1 500' } });
    const log = await eventsWhen(
      a,
      id,
      'the command and its output',
      (events) => events.some((e) => e.event.type === 'command_output') && endsAwaiting(events),
      30_000,
    );

    await onB.waitUntil(() => onB.lastSeq() >= log.at(-1)!.seq, { what: "every event on B's client" });
    await onA.waitUntil(() => onA.lastSeq() >= log.at(-1)!.seq, { what: "every event on A's client" });
    // Every event once, in order, as the log has them; and most of them came live, after B's client joined.
    expect(onB.events().map(asLogged)).toEqual(log);
    expect(onA.events().map(asLogged)).toEqual(log);
    expect(log.filter((e) => e.seq > joinedAt).length).toBeGreaterThan(10);
    expect(eventTexts(onB)).toEqual(eventTexts(onA));
    expect(eventTexts(onB)).toHaveLength(log.length);
    expect([onA.invalid, onB.invalid]).toEqual([[], []]);
    // Both processes' REST answers are the same log; the session ran on A only.
    expect(await allEvents(b.baseUrl, id)).toEqual(log);
    expect(log.filter((e) => e.event.type === 'session_rehydrated')).toEqual([]);
    const infoB = await http<ConversationInfo>(b.baseUrl, 'GET', `/api/conversations/${id}`);
    const infoA = await http<ConversationInfo>(a.baseUrl, 'GET', `/api/conversations/${id}`);
    expect([infoA.body.in_memory, infoB.body.in_memory]).toEqual([true, false]);
    expect(infoB.body).toMatchObject({ state: 'awaiting_user_input', last_seq: log.at(-1)!.seq });

    // Status frames reach B's client too (over core NATS): the runtime dies on A, both clients are told.
    const statusFrom = onB.frames.length;
    onA.send({ type: 'user_action', action: { type: 'run', command: 'kill -9 $$' } });
    for (const client of [onA, onB]) {
      await client.waitFor((f) => f.type === 'status' && f.id === 'STATUS$ERROR_RUNTIME_DISCONNECTED', {
        from: client === onB ? statusFrom : 0,
        what: 'the runtime-disconnected status frame',
      });
    }
  }, 60_000);
});
