import type { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { holdForTurn } from '../../src/server/turnCork.ts';

/*
 * The frames a socket gets in one turn of the event loop leave in one write
 * (issue 28): a client catching up gets a page of events at once.
 */

const closers: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A ws server and a client connected to it: the server's socket, and the frames the client got. */
async function pair(): Promise<{ server: WebSocket; got: string[] }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  closers.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
  await new Promise((resolve) => wss.once('listening', resolve));
  const accepted = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as { port: number }).port}`);
  closers.push(() => client.terminate());
  const got: string[] = [];
  client.on('message', (data: Buffer) => got.push(data.toString('utf8')));
  await new Promise((resolve) => client.once('open', resolve));
  return { server: await accepted, got };
}

/** Counts the socket's writes: one call of `_writev` carries many chunks, `_write` one. */
function countWrites(socket: Socket): { calls: number; chunks: number } {
  const counts = { calls: 0, chunks: 0 };
  const inner = socket as unknown as {
    _writev: (chunks: unknown[], cb: () => void) => void;
    _write: (chunk: unknown, encoding: string, cb: () => void) => void;
  };
  const [writev, write] = [inner._writev.bind(socket), inner._write.bind(socket)];
  inner._writev = (chunks, cb) => {
    counts.calls += 1;
    counts.chunks += chunks.length;
    writev(chunks, cb);
  };
  inner._write = (chunk, encoding, cb) => {
    counts.calls += 1;
    counts.chunks += 1;
    write(chunk, encoding, cb);
  };
  return counts;
}

describe('holdForTurn', () => {
  it('sends the frames of one turn in one write, in order, once the turn ends', async () => {
    const { server, got } = await pair();
    const socket = (server as unknown as { _socket: Socket })._socket;
    const counts = countWrites(socket);
    for (let i = 0; i < 100; i++) {
      holdForTurn(server);
      server.send(`frame ${i}`);
    }
    expect(counts.calls).toBe(0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(counts).toEqual({ calls: 1, chunks: 200 });
    await expect.poll(() => got.length).toBe(100);
    expect(got).toEqual(Array.from({ length: 100 }, (_, i) => `frame ${i}`));
  });

  it('holds nothing for a socket that is gone, and each turn is written apart', async () => {
    const { server, got } = await pair();
    const counts = countWrites((server as unknown as { _socket: Socket })._socket);
    holdForTurn(server);
    server.send('first');
    await new Promise((resolve) => setImmediate(resolve));
    holdForTurn(server);
    server.send('second');
    await new Promise((resolve) => setImmediate(resolve));
    expect(counts.calls).toBe(2);
    await expect.poll(() => got).toEqual(['first', 'second']);
    server.terminate();
    expect(() => holdForTurn(server)).not.toThrow();
  });
});
