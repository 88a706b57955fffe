import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../src/protocol/index.ts';
import {
  allEvents,
  createConversation,
  eventually,
  startServer,
  type ServerProcess,
} from '../support/serverProcess.ts';
import { WsClient, wsUrlFor } from '../support/wsClient.ts';

// Each command prints 500 kB, so each command_output event is about that size (under
// NATS's default 1 MB payload limit). 80 of them put 40 MB in front of a client that
// does not read: far more than any sane per-connection buffer, and 40 times the
// largest frame the server accepts.
const OUTPUT_BYTES = 500_000;
const COMMANDS = 80;

let server: ServerProcess;
const sockets: WsClient[] = [];

beforeAll(async () => {
  server = await startServer({ env: { TETHER_OUTPUT_CAP_BYTES: String(OUTPUT_BYTES + 10_000) } });
}, 60_000);

afterAll(async () => {
  await Promise.all(sockets.map((s) => s.terminate()));
  await server?.stop();
});

async function connect(id: string, afterSeq?: number): Promise<WsClient> {
  const client = await WsClient.connect(wsUrlFor(server.wsUrl, id, afterSeq));
  sockets.push(client);
  await client.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
  return client;
}

describe('a client that stops reading', () => {
  it('is closed with 1013 instead of being buffered without bound, and catches up by reconnecting with its cursor', async () => {
    const id = await createConversation(server.baseUrl);
    const producer = await connect(id);
    const slow = await connect(id);
    await slow.roundTrip();
    // Stop reading: the kernel buffers fill, then whatever the server queues for this client.
    slow.socket.pause();

    for (let i = 0; i < COMMANDS; i++) {
      const from = producer.frames.length;
      producer.send({ type: 'user_action', action: { type: 'run', command: `head -c ${OUTPUT_BYTES} /dev/zero | tr '\\0' x` } });
      // One at a time: a run action is only accepted while the agent waits.
      await producer.waitFor(
        (f) => f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === 'awaiting_user_input',
        { from, what: `command ${i} to finish`, timeoutMs: 30_000 },
      );
    }
    const rest = await eventually(
      async () => {
        const events = await allEvents(server.baseUrl, id);
        const outputs = events.filter((e) => e.event.type === 'command_output').length;
        const last = events.at(-1)?.event;
        const idle = last?.type === 'agent_state_changed' && ['awaiting_user_input', 'finished'].includes(last.data.state);
        return outputs === COMMANDS && idle ? events : undefined;
      },
      `${COMMANDS} command outputs stored`,
      120_000,
    );
    const outputs = rest.filter((e): e is LoggedEvent & { event: { type: 'command_output' } } => e.event.type === 'command_output');
    expect(outputs.every((e) => e.event.data.output.length === OUTPUT_BYTES)).toBe(true);

    // The reading client got everything.
    await producer.waitUntil(() => producer.lastSeq() >= rest.at(-1)!.seq, { what: 'every event on the reading client', timeoutMs: 60_000 });
    expect(producer.seqs()).toEqual(rest.map((e) => e.seq));

    // The slow one reads again: what it finds at the end of its stream is a 1013 close, not a live connection.
    slow.socket.resume();
    const outcome = await Promise.race([
      slow.closed.then((c) => `closed with ${c.code}`),
      slow.roundTrip(60_000).then(() => 'still open after every event was delivered'),
    ]);
    expect(outcome).toBe('closed with 1013');

    // What it received is a gap-free prefix; reconnecting with its cursor gives the rest.
    const seen = slow.seqs();
    expect(seen).toEqual(rest.slice(0, seen.length).map((e) => e.seq));
    const again = await connect(id, slow.lastSeq());
    await again.waitUntil(() => again.lastSeq() >= rest.at(-1)!.seq, { what: 'the rest of the events', timeoutMs: 60_000 });
    expect([...seen, ...again.seqs()]).toEqual(rest.map((e) => e.seq));
  }, 240_000);
});
