import { describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import {
  contentCounts,
  deliveryProblem,
  embeddedNatsPid,
  idProblem,
  isUserMessageFrame,
  stopProcess,
  untilQuiet,
  type Connection,
} from '../support/faults.ts';
import { createConversation, http } from '../support/serverProcess.ts';
import { wsUrlFor, type Frame } from '../support/wsClient.ts';

const e2e = useE2e();

describe('a hung NATS server', () => {
  it('says not ready while nats-server hangs, stores the message that timed out at most once, and sends an open ws client every stored event once', async (ctx) => {
    const server = await e2e.start({ env: { TETHER_AGENT_DELAY_MS: '0' } });
    ctx.onTestFailed(() => console.log(`tether stderr (tail):\n${server.stderr().slice(-4_000)}`));
    const id = await createConversation(server.baseUrl);
    await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000, stableMs: 100 });
    const ws = e2e.open(wsUrlFor(server.wsUrl, id, 0));
    await ws.opened;
    const connection: Connection = { ws, afterSeq: 0 };
    // A message answered live first: the client's catch-up ends with a read once the node's follow is ready,
    // and a hang during that read closes it (1011, reconnect with your cursor), which is not this test's case.
    ws.sendMessage('sent before the hang', 'before-1');
    await ws.waitFor((f) => isUserMessageFrame(f, 'sent before the hang'), { what: 'the message before the hang' });
    await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000, stableMs: 100 });
    await ws.roundTrip();

    // A hung nats-server (not dead: its socket stays open) takes the publish but answers only once it runs again.
    const nats = embeddedNatsPid(server.dataDir);
    expect(nats).toBeDefined();
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);
    await stopProcess(nats!);
    let error: Frame;
    let readyWhileHung: number;
    try {
      ws.sendMessage('sent while nats-server hangs', 'hung-1');
      // Its connection looks fine, but it does not answer: not ready.
      readyWhileHung = (await http(server.baseUrl, 'GET', '/readyz')).status;
      error = await ws.waitFor((f) => f.type === 'error' || isUserMessageFrame(f, 'sent while nats-server hangs'), {
        timeoutMs: 20_000,
      });
    } finally {
      process.kill(nats!, 'SIGCONT');
    }
    expect(readyWhileHung).toBe(503);
    // Tether gave up waiting: "it may or may not be stored".
    expect(error).toMatchObject({ type: 'error', code: 'STORE_UNAVAILABLE' });
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);

    ws.sendMessage('sent after it runs again', 'after-1');
    await ws.waitFor((f) => isUserMessageFrame(f, 'sent after it runs again'), {
      timeoutMs: 20_000,
      what: 'the next message back',
    });
    const logs = await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000 });
    await ws.roundTrip();
    const log = logs.get(id)!;
    // It may or may not have been stored (a write before its append may be what timed out), but never twice.
    expect(contentCounts(log).get('sent while nats-server hangs') ?? 0).toBeLessThanOrEqual(1);
    expect(idProblem(log)).toBeNull();
    // The socket stayed open through it all, so it must have every stored event once, in order, up to the end of the log.
    expect(ws.isOpen).toBe(true);
    expect(deliveryProblem(connection, log, true)).toBeNull();
  }, 60_000);
});
