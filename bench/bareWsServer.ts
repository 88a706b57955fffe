// The density baseline: a bare `ws` server (a WebSocketServer with its own
// http listener, no logic) in a node process of its own, started with
// --expose-gc by densityRuns.ts, so its heap holds the connections and nothing else.
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { heapByKind, type HeapKind } from './densitySnapshot.ts';
import { answerCommands, memoryNow, type MemoryReading } from './heapBench.ts';

export interface ServerMemory extends MemoryReading {
  /** Open ws connections the server holds. */
  connections: number;
}

export type BareWsProtocol = {
  start: { args: object; reply: { port: number } };
  measure: { args: object; reply: ServerMemory };
  heapByKind: { args: object; reply: HeapKind[] };
  close: { args: object; reply: null };
};

let wss: WebSocketServer | null = null;
// One shared function: an unhandled 'error' would end the process, and a closure per socket would be logic.
const ignore = () => {};

answerCommands<BareWsProtocol>({
  start: async () => {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    wss = server;
    server.on('connection', (ws) => ws.on('error', ignore));
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    return { port: (server.address() as AddressInfo).port };
  },
  measure: async () => ({ ...(await memoryNow()), connections: wss?.clients.size ?? 0 }),
  heapByKind,
  close: async () => {
    const server = wss;
    wss = null;
    if (server) {
      for (const ws of server.clients) ws.terminate();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    return null;
  },
});
