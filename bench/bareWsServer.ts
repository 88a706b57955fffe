// The density baseline: a bare `ws` server (a WebSocketServer with its own
// http listener, no logic) in a node process of its own, started with
// --expose-gc by densityRows.ts, so its heap holds the connections and nothing else.
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { answerCommands, memoryNow } from './heapBench.ts';
import { heapByKind, type HeapKind } from './densitySnapshot.ts';

export type BareWsCommand = { type: 'start' } | { type: 'measure' } | { type: 'heapByKind' } | { type: 'close' };

export interface ServerMemory {
  heapBytes: number;
  rssBytes: number;
  /** Open ws connections the server holds. */
  connections: number;
}

export type BareWsReply = { port: number } | ServerMemory | HeapKind[] | null;

let wss: WebSocketServer | null = null;
// One shared function: an unhandled 'error' would end the process, and a closure per socket would be logic.
const ignore = () => {};

async function handle(command: BareWsCommand): Promise<BareWsReply> {
  switch (command.type) {
    case 'start': {
      const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
      wss = server;
      server.on('connection', (ws) => ws.on('error', ignore));
      await new Promise<void>((resolve, reject) => {
        server.once('listening', resolve);
        server.once('error', reject);
      });
      return { port: (server.address() as AddressInfo).port };
    }
    case 'measure':
      return { ...(await memoryNow()), connections: wss?.clients.size ?? 0 };
    case 'heapByKind':
      return heapByKind();
    case 'close': {
      const server = wss;
      wss = null;
      if (server) {
        for (const ws of server.clients) ws.terminate();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
      return null;
    }
  }
}

answerCommands(handle);
