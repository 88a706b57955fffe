// The density step's ws clients: up to 10,000 sockets in one node process of
// their own (the server's heap must not hold them), idle once connected. A
// Tether client (the protocol client, src/client/) is connected when its
// `sync` frame arrived; a bare ws client (the baseline's, ws itself) when the
// socket opened. densityRuns.ts drives it over IPC.
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import WebSocket from 'ws';
import { protocolClient, type ProtocolClient } from '../src/client/index.ts';
import { BenchSocket } from './benchSocket.ts';
import { answerCommands } from './heapBench.ts';

export interface ClientsStatus {
  open: number;
  /** Sockets the server closed, or that failed, after they had connected. */
  lost: number;
  /** Tether clients that received their conversation's `session_passivated` event. */
  sawPassivation: number;
}

export type ClientsProtocol = {
  /** Opens a socket to each url, CONNECTING_AT_ONCE at a time; with `sync`, each counts once the server's `sync` frame arrived. */
  connect: { args: { urls: string[]; sync: boolean }; reply: { ms: number } };
  status: { args: object; reply: ClientsStatus };
  /** The clients at these indexes each make a round trip (see roundTrip). */
  check: { args: { indexes: number[]; timeoutMs: number }; reply: { ms: number } };
  close: { args: object; reply: null };
};

interface EventFrame {
  type: string;
  seq?: number;
  state?: string;
  event?: { type: string; source: string; data?: { content?: string } };
}

/** One idle client: it only remembers whether its session told it that it left memory. */
class IdleClient {
  sawPassivation = false;
  lost = false;
  closing = false;
  listener: ((frame: EventFrame) => void) | null = null;
  /** The Tether client, or the bare baseline's socket. */
  tether: ProtocolClient<BenchSocket> | null = null;
  bare: WebSocket | null = null;
  /** Called when the socket has closed (set by `close`). */
  onClosed: (() => void) | null = null;

  get socket(): WebSocket | null {
    return this.tether ? this.tether.socket : this.bare;
  }
}

let clients: IdleClient[] = [];
const CONNECTING_AT_ONCE = 200;

function open(url: string, sync: boolean): Promise<IdleClient> {
  return sync ? openTether(url) : openBare(url);
}

/** A Tether client: connected once `sync` came with the conversation awaiting the user. */
function openTether(url: string): Promise<IdleClient> {
  const client = new IdleClient();
  return new Promise((resolve, reject) => {
    let connected = false;
    const lostOr = (err: Error) => (connected ? (client.lost = true) : reject(err));
    client.tether = protocolClient({
      WebSocket: BenchSocket,
      url,
      reconnect: false,
      handlers: {
        sync: (frame) => {
          if (frame.state !== 'awaiting_user_input') return reject(new Error(`${url}: sync in state ${frame.state}`));
          connected = true;
          resolve(client);
        },
        event: (frame) => {
          if (frame.event.type === 'session_passivated') client.sawPassivation = true;
          client.listener?.(frame as unknown as EventFrame);
        },
        error: (frame) => {
          client.lost = true;
          client.listener?.(frame);
        },
        invalid: (frame) => lostOr(new Error(`${url}: ${frame.problem}: ${frame.raw.slice(0, 300)}`)),
        socketError: (event) => lostOr((event as { error?: Error }).error ?? new Error(`${url}: socket error`)),
        close: ({ code, reason }) => {
          if (client.closing) return client.onClosed?.();
          lostOr(new Error(`${url} closed before it connected (${code} ${reason})`));
        },
      },
    });
  });
}

/** The baseline's client: ws itself, connected once the socket opened. */
function openBare(url: string): Promise<IdleClient> {
  const socket = new WebSocket(url, { perMessageDeflate: false });
  const client = new IdleClient();
  client.bare = socket;
  return new Promise((resolve, reject) => {
    let connected = false;
    socket.on('error', (err) => (connected ? (client.lost = true) : reject(err)));
    socket.on('close', (code, reason) => {
      if (client.closing) return client.onClosed?.();
      if (connected) client.lost = true;
      else reject(new Error(`${url} closed before it connected (${code} ${reason.toString()})`));
    });
    socket.once('open', () => {
      connected = true;
      resolve(client);
    });
  });
}

/**
 * The client sends a user message on its (hibernated) conversation and waits
 * until it comes back stored, with the session's `session_rehydrated` before
 * it and the agent's answer after it: the connection works after hibernation.
 */
function roundTrip(client: IdleClient, index: number, timeoutMs: number): Promise<void> {
  const content = `density check ${index}`;
  return new Promise((resolve, reject) => {
    let rehydrated = false;
    let echoed = false;
    const timer = setTimeout(() => {
      client.listener = null;
      reject(
        new Error(
          `client ${index}: no ${echoed ? 'agent answer' : 'stored message'} within ${timeoutMs} ms (rehydrated: ${rehydrated})`,
        ),
      );
    }, timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      client.listener = null;
      reject(err);
    };
    client.listener = (frame) => {
      const event = frame.event;
      if (frame.type === 'error') return fail(new Error(`client ${index}: error frame ${JSON.stringify(frame)}`));
      if (!event) return;
      if (event.type === 'session_rehydrated') rehydrated = true;
      else if (event.type === 'message' && event.source === 'user' && event.data?.content === content) echoed = true;
      else if (echoed && event.source === 'agent' && (event.type === 'message' || event.type === 'finish')) {
        if (!rehydrated)
          return fail(
            new Error(`client ${index}: answered without session_rehydrated first: was its session hibernated?`),
          );
        clearTimeout(timer);
        client.listener = null;
        resolve();
      }
    };
    if (!client.tether) return fail(new Error(`client ${index}: a round trip needs a Tether client`));
    client.tether.send({ type: 'message', content }, `density-${index}`);
  });
}

answerCommands<ClientsProtocol>({
  connect: async ({ urls, sync }) => {
    if (clients.length > 0) throw new Error('close the previous clients first');
    const limit = pLimit(CONNECTING_AT_ONCE);
    const t0 = performance.now();
    clients = await Promise.all(urls.map((url) => limit(() => open(url, sync))));
    return { ms: performance.now() - t0 };
  },
  status: async () => ({
    open: clients.filter((c) => c.socket?.readyState === WebSocket.OPEN).length,
    lost: clients.filter((c) => c.lost).length,
    sawPassivation: clients.filter((c) => c.sawPassivation).length,
  }),
  check: async ({ indexes, timeoutMs }) => {
    const t0 = performance.now();
    await Promise.all(
      indexes.map((i) => {
        const client = clients[i];
        if (!client) throw new Error(`no client ${i}`);
        return roundTrip(client, i, timeoutMs);
      }),
    );
    return { ms: performance.now() - t0 };
  },
  close: async () => {
    const closing = clients.map(
      (c) =>
        new Promise<void>((resolve) => {
          const socket = c.socket;
          if (!socket || socket.readyState === WebSocket.CLOSED) return resolve();
          c.closing = true;
          c.onClosed = resolve;
          if (c.tether) c.tether.close(1000);
          else socket.close(1000);
        }),
    );
    clients = [];
    // Wait (bounded) for the closing handshakes, so the next server starts with none of these.
    await Promise.race([Promise.all(closing), new Promise((r) => setTimeout(r, 5_000))]);
    return null;
  },
});
