// The density step's ws clients: up to 10,000 sockets in one node process of
// their own (the server's heap must not hold them), idle once connected. A
// Tether client is connected when its `sync` frame arrived; a bare ws client
// when the socket opened. densityRuns.ts drives it over IPC.
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import WebSocket from 'ws';
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
  listener: ((frame: EventFrame) => void) | null = null;

  constructor(readonly socket: WebSocket) {}
}

let clients: IdleClient[] = [];
const CONNECTING_AT_ONCE = 200;

function open(url: string, sync: boolean): Promise<IdleClient> {
  const socket = new WebSocket(url, { perMessageDeflate: false });
  const client = new IdleClient(socket);
  return new Promise((resolve, reject) => {
    let connected = false;
    const connectedNow = () => {
      connected = true;
      resolve(client);
    };
    socket.on('error', (err) => (connected ? (client.lost = true) : reject(err)));
    socket.on('close', (code, reason) => {
      if (connected) client.lost = true;
      else reject(new Error(`${url} closed before it connected (${code} ${reason.toString()})`));
    });
    if (!sync) socket.once('open', connectedNow);
    socket.on('message', (data) => {
      const frame = JSON.parse((data as Buffer).toString()) as EventFrame;
      if (frame.type === 'sync') {
        if (frame.state === 'awaiting_user_input') connectedNow();
        else reject(new Error(`${url}: sync in state ${frame.state}`));
      } else if (frame.type === 'error') {
        client.lost = true;
      } else if (frame.event?.type === 'session_passivated') {
        client.sawPassivation = true;
      }
      client.listener?.(frame);
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
    client.socket.send(
      JSON.stringify({ type: 'user_action', action: { type: 'message', content }, client_id: `density-${index}` }),
    );
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
    open: clients.filter((c) => c.socket.readyState === WebSocket.OPEN).length,
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
          if (c.socket.readyState === WebSocket.CLOSED) return resolve();
          c.socket.removeAllListeners('close');
          c.socket.once('close', () => resolve());
          c.socket.close(1000);
        }),
    );
    clients = [];
    // Wait (bounded) for the closing handshakes, so the next server starts with none of these.
    await Promise.race([Promise.all(closing), new Promise((r) => setTimeout(r, 5_000))]);
    return null;
  },
});
