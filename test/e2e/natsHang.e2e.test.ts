import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../src/protocol/index.ts';
import { contentCounts, describeLog, embeddedNatsPid, idProblem, untilQuiet } from '../support/faults.ts';
import { createConversation, http, startServer, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor, type Frame } from '../support/wsClient.ts';

/** A ws connection and the cursor it was opened with. */
interface Connection {
  ws: WsClient;
  afterSeq: number;
}

const servers: ServerProcess[] = [];
const sockets: WsClient[] = [];

afterEach(async () => {
  await Promise.all(sockets.splice(0).map((s) => s.terminate()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

const isMessageEvent = (frame: Frame, content: string) =>
  frame.type === 'event' && frame.event.source === 'user' && frame.event.type === 'message' && frame.event.data.content === content;

/** What a connection missed or got wrong compared with the log: it must have every event after its cursor, once, in order. */
function deliveryProblem(connection: Connection, log: readonly LoggedEvent[], wholeLog: boolean): string | null {
  const got = connection.ws.events();
  if (got.length === 0 && !wholeLog) return null;
  const through = wholeLog ? (log.at(-1)?.seq ?? 0) : got.at(-1)!.seq;
  const expected = log.filter((e) => e.seq > connection.afterSeq && e.seq <= through);
  const gotSeqs = got.map((f) => f.seq);
  const expectedSeqs = expected.map((e) => e.seq);
  if (gotSeqs.join() !== expectedSeqs.join()) {
    const missing = expectedSeqs.filter((s) => !gotSeqs.includes(s));
    const extra = gotSeqs.filter((s, i) => !expectedSeqs.includes(s) || gotSeqs.indexOf(s) !== i);
    const detail = missing.map((s) => describeLog(log.filter((e) => e.seq === s))).join(' | ');
    return `after_seq=${connection.afterSeq} through ${through}: missing seqs [${missing.join(', ')}] (${detail}), extra or repeated [${extra.join(', ')}]`;
  }
  const differing = got.filter((f, i) => JSON.stringify(f.event) !== JSON.stringify(expected[i]!.event));
  return differing.length === 0 ? null : `frames differ from the log at seqs ${differing.map((f) => f.seq).join(', ')}`;
}

describe('a hung NATS server', () => {
  it('says not ready while nats-server hangs, and sends an open ws client the message it stored after its acknowledgement timed out', async (ctx) => {
    const server = await startServer({ env: { TETHER_AGENT_DELAY_MS: '0' } });
    servers.push(server);
    ctx.onTestFailed(() => console.log(`tether stderr (tail):\n${server.stderr().slice(-4_000)}`));
    const id = await createConversation(server.baseUrl);
    await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000, stableMs: 100 });
    const ws = await WsClient.connect(wsUrlFor(server.wsUrl, id, 0));
    sockets.push(ws);
    await ws.roundTrip();
    const connection: Connection = { ws, afterSeq: 0 };

    // A hung nats-server (not dead: its socket stays open) takes the publish but answers only once it runs again.
    const nats = embeddedNatsPid(server.dataDir);
    expect(nats).toBeDefined();
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);
    process.kill(nats!, 'SIGSTOP');
    let error: Frame;
    let readyWhileHung: number;
    try {
      ws.sendMessage('sent while nats-server hangs', 'hung-1');
      // Its connection looks fine, but it does not answer: not ready.
      readyWhileHung = (await http(server.baseUrl, 'GET', '/readyz')).status;
      error = await ws.waitFor((f) => f.type === 'error' || isMessageEvent(f, 'sent while nats-server hangs'), { timeoutMs: 20_000 });
    } finally {
      process.kill(nats!, 'SIGCONT');
    }
    expect(readyWhileHung).toBe(503);
    // Tether gave up waiting: "it may or may not be stored".
    expect(error).toMatchObject({ type: 'error', code: 'STORE_UNAVAILABLE' });
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);

    ws.sendMessage('sent after it runs again', 'after-1');
    await ws.waitFor((f) => isMessageEvent(f, 'sent after it runs again'), { timeoutMs: 20_000, what: 'the next message back' });
    const logs = await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000 });
    await ws.roundTrip();
    const log = logs.get(id)!;
    // It was stored after all, once.
    expect(contentCounts(log).get('sent while nats-server hangs')).toBe(1);
    expect(idProblem(log)).toBeNull();
    // The socket stayed open through it all, so it must have every stored event once, in order, up to the end of the log.
    expect(ws.isOpen).toBe(true);
    expect(deliveryProblem(connection, log, true)).toBeNull();
  }, 60_000);
});
