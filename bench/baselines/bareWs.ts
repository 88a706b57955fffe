// Baseline: a bare `ws` server holding idle connections, with no logic (a
// WebSocketServer on its own listener, one shared no-op `error` listener per
// socket), in a process of its own started with --expose-gc, so that its heap
// is read the way the Tether host's is (`memory()`).
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { memory, track, untrack } from '../harness/measure.ts';
import { Proc } from '../harness/proc.ts';

// In the server process.
let wss: WebSocketServer | undefined;
// Shared: an unhandled `error` would end the process, and a closure per socket would be logic.
const ignore = () => {};

export async function startBareWs(): Promise<number> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  server.on('connection', (ws) => ws.on('error', ignore));
  await new Promise((resolve, reject) => server.once('listening', resolve).once('error', reject));
  wss = server;
  return (server.address() as AddressInfo).port;
}

/** Heap after GCs, code, RSS, and the connections it holds. */
export async function bareWsMemory() {
  return { ...(await memory()), connections: wss?.clients.size ?? 0 };
}

export async function stopBareWs(): Promise<void> {
  const server = wss;
  wss = undefined;
  server?.clients.forEach((ws) => ws.terminate());
  await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
}

/** The bench's handle on the server process. */
export class BareWsServer {
  readonly proc = new Proc('bare-ws', { gc: true });
  port = 0;
  static async start(): Promise<BareWsServer> {
    const s = new BareWsServer();
    track('bare-ws', s.proc.pid);
    s.port = await s.proc.call(import.meta.url, startBareWs, []);
    return s;
  }
  get url(): string {
    return `ws://127.0.0.1:${this.port}/`;
  }
  memory() {
    return this.proc.call(import.meta.url, bareWsMemory, []);
  }
  async stop(): Promise<void> {
    await this.proc.call(import.meta.url, stopBareWs, []).catch(() => undefined);
    untrack('bare-ws');
    await this.proc.stop();
  }
}
