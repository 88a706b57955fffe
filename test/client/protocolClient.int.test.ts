// The protocol client against a real `ws` WebSocketServer in this process that plays the protocol
// (protocolServer.ts): real sockets, no mock of the socket layer, no Tether and no NATS.
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ServerFrame } from '../../protocol/index.ts';
import {
  ConnectionClosedError,
  protocolClient,
  type ClientState,
  type CloseInfo,
  type EventFrame,
  type InvalidFrame,
  type ProtocolClient,
  type ProtocolClientOptions,
} from '../../src/client/index.ts';
import { ProtocolServer } from './protocolServer.ts';

/** What a client told its caller, in order. */
interface Recorded {
  events: EventFrame[];
  raw: string[];
  syncs: number;
  states: ClientState[];
  closes: CloseInfo[];
  invalid: InvalidFrame[];
  errors: string[];
  statuses: string[];
}

const servers: ProtocolServer[] = [];
const clients: ProtocolClient[] = [];

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

async function serve(options: Parameters<typeof ProtocolServer.start>[0] = {}): Promise<ProtocolServer> {
  const server = await ProtocolServer.start(options);
  servers.push(server);
  return server;
}

function connect(
  server: ProtocolServer,
  options: Partial<ProtocolClientOptions<WebSocket>> = {},
): { client: ProtocolClient<WebSocket>; seen: Recorded } {
  const seen: Recorded = {
    events: [],
    raw: [],
    syncs: 0,
    states: [],
    closes: [],
    invalid: [],
    errors: [],
    statuses: [],
  };
  const client = protocolClient({
    WebSocket,
    url: server.url,
    conversationId: 'conv-1',
    reconnect: { initialMs: 20, maxMs: 100 },
    handlers: {
      event: (frame, raw) => (seen.events.push(frame), seen.raw.push(raw)),
      sync: () => void (seen.syncs += 1),
      state: (state) => void seen.states.push(state),
      close: (info) => void seen.closes.push(info),
      invalid: (frame) => void seen.invalid.push(frame),
      error: (frame) => void seen.errors.push(frame.code),
      status: (frame) => void seen.statuses.push(frame.id),
    },
    ...options,
  });
  clients.push(client);
  return { client, seen };
}

const seqs = (seen: Recorded) => seen.events.map((e) => e.seq);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
/** Resolves once `condition()` holds, checked every few ms. */
async function until(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${condition.toString()}`);
    await sleep(5);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('ProtocolClient', () => {
  it('resumes after a drop with its cursor and gets exactly the missed events, once and in order', async () => {
    const server = await serve({ events: 3 });
    const { client, seen } = connect(server);
    await until(() => seen.events.length === 3);
    expect(client.state).toBe('live');

    server.connections[0]!.socket.terminate();
    await until(() => seen.closes.length === 1);
    server.append(3); // Stored while the client is away.
    await until(() => seen.syncs === 2 && seen.events.length === 6);
    server.append(1); // Live on the new socket.
    await until(() => seen.events.length === 7);

    expect(seqs(seen)).toEqual(range(1, 7));
    expect(server.connections.map((c) => c.query.get('after_seq'))).toEqual(['0', '3']);
    expect(seen.closes).toEqual([{ code: 1006, reason: '', final: false }]);
    expect(seen.states).toEqual(['live', 'waiting', 'connecting', 'live']);
    expect(client.cursor).toBe(7);
    expect(seen.invalid).toEqual([]);
    // Each event's text as the server sent it.
    expect(seen.raw[6]).toBe(JSON.stringify({ type: 'event', seq: 7, event: server.log[6]!.event }));
  });

  it('reports an event at or before its cursor as out of order and passes each event on once', async () => {
    const server = await serve({ events: 4, replayBefore: 2 });
    const { seen } = connect(server, { afterSeq: 3 });
    await until(() => seen.events.length === 1 && seen.invalid.length === 2);
    expect(seqs(seen)).toEqual([4]);
    expect(seen.invalid.map((f) => [f.reason, (f.value as EventFrame).seq])).toEqual([
      ['order', 2],
      ['order', 3],
    ]);
    expect(server.connections[0]!.query.get('after_seq')).toBe('3');
  });

  it('sends actions asked for while it was down once, after the next sync, each with its client_id (or none)', async () => {
    const server = await serve({ events: 1 });
    const { client, seen } = connect(server);
    await until(() => seen.events.length === 1);
    server.connections[0]!.socket.terminate();
    await until(() => client.state === 'waiting');

    const first = client.send({ type: 'message', content: 'one' });
    const second = client.send({ type: 'message', content: 'two' }, 'my-id');
    client.send({ type: 'message', content: 'three' }, null);
    await until(() => seen.events.length === 4);
    await sleep(100);

    expect(second).toBe('my-id');
    expect(first).toMatch(/^[0-9a-f-]{36}$/);
    expect(server.connections[0]!.received).toEqual([]);
    expect(server.connections[1]!.received).toEqual([
      { type: 'user_action', action: { type: 'message', content: 'one' }, client_id: first },
      { type: 'user_action', action: { type: 'message', content: 'two' }, client_id: 'my-id' },
      { type: 'user_action', action: { type: 'message', content: 'three' } },
    ]);
    expect(seen.events.slice(1).map((e) => e.event.source)).toEqual(['user', 'user', 'user']);
  });

  it('does not reconnect after 4004', async () => {
    const server = await serve({ conversationId: 'another' });
    const { client, seen } = connect(server);
    await until(() => seen.closes.length === 1);
    await sleep(300); // Several backoff periods.
    expect(seen.closes).toEqual([{ code: 4004, reason: 'unknown conversation', final: true }]);
    expect(server.connections).toHaveLength(1);
    expect(client.state).toBe('closed');
  });

  it('reconnects after 1013 (slow consumer) with its cursor', async () => {
    const server = await serve({ events: 2 });
    const { seen } = connect(server);
    await until(() => seen.events.length === 2);
    server.connections[0]!.socket.close(1013, 'slow consumer');
    await until(() => seen.syncs === 2);
    expect(seen.closes).toEqual([{ code: 1013, reason: 'slow consumer', final: false }]);
    expect(server.connections[1]!.query.get('after_seq')).toBe('2');
  });

  it('reports invalid frames and passes none of them on; the connection stays', async () => {
    const server = await serve({ events: 1 });
    const { client, seen } = connect(server);
    await until(() => seen.events.length === 1);
    const socket = server.connections[0]!.socket;
    socket.send('not json');
    socket.send('{"type":"event","seq":"2","event":{"type":"message"}}');
    socket.send('{"type":"nope"}');
    socket.send('[1]');
    socket.send(Buffer.from('{"type":"pong"}'), { binary: true });
    await client.ping();
    expect(seen.invalid.map((f) => [f.reason, f.raw])).toEqual([
      ['not_json', 'not json'],
      ['shape', '{"type":"event","seq":"2","event":{"type":"message"}}'],
      ['shape', '{"type":"nope"}'],
      ['shape', '[1]'],
      ['binary', '{"type":"pong"}'],
    ]);
    expect(seen.invalid[1]!.problem).toMatch(/seq/);
    expect(seqs(seen)).toEqual([1]);
    expect(client.state).toBe('live');
  });

  it('passes an event with a malformed body by default, and reports it with the strict check', async () => {
    const bad = '{"type":"event","seq":2,"event":{"type":"message","data":{}}}';
    const light = await serve({ events: 1 });
    const lax = connect(light);
    const strict = await serve({ events: 1 });
    const checked = connect(strict, { check: (value) => ServerFrame.safeParse(value) });
    await until(() => lax.seen.events.length === 1);
    await until(() => checked.seen.events.length === 1);
    light.connections[0]!.socket.send(bad);
    strict.connections[0]!.socket.send(bad);
    await Promise.all([lax.client.ping(), checked.client.ping()]);

    expect(seqs(lax.seen)).toEqual([1, 2]);
    expect(seqs(checked.seen)).toEqual([1]);
    expect(checked.seen.invalid).toEqual([expect.objectContaining({ reason: 'shape', raw: bad })]);
    expect(checked.seen.invalid[0]!.problem).toMatch(/content|conversation_id|id/);
    // The strict check takes what Tether sends.
    strict.append(1);
    await until(() => checked.seen.events.length === 2);
    expect(seqs(checked.seen)).toEqual([1, 2]);
  });

  it('surfaces status and error frames, answers a ping, sends the token, and stays closed after close()', async () => {
    const server = await serve();
    const { client, seen } = connect(server, { token: 't0k' });
    await until(() => seen.syncs === 1);
    const socket = server.connections[0]!.socket;
    socket.send('{"type":"status","level":"info","id":"STATUS$RUNTIME_CONNECTED","message":"up"}');
    socket.send('{"type":"error","code":"BAD_FRAME","message":"no"}');
    await client.ping();
    expect(seen.statuses).toEqual(['STATUS$RUNTIME_CONNECTED']);
    expect(seen.errors).toEqual(['BAD_FRAME']);
    expect(server.connections[0]!.query.get('token')).toBe('t0k');

    const pending = client.ping();
    client.close();
    await expect(pending).rejects.toBeInstanceOf(ConnectionClosedError);
    await until(() => seen.closes.length === 1);
    await sleep(200);
    expect(seen.closes).toEqual([{ code: 1000, reason: '', final: true }]);
    expect(server.connections).toHaveLength(1);
    expect(client.state).toBe('closed');
  });
});
