import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';

/** One socket the server accepted, with its query and the frames it received. */
export interface ServerConnection {
  socket: WebSocket;
  query: URLSearchParams;
  received: Array<Record<string, unknown>>;
}

export interface ProtocolServerOptions {
  conversationId?: string;
  /** Stored events before anyone connects. */
  events?: number;
  /** Replay this many events before the client's `after_seq` as well: a server that breaks the protocol. */
  replayBefore?: number;
}

/**
 * A small in-process server that plays Tether's WebSocket protocol for one
 * conversation over a real `ws` WebSocketServer: `sync`, the stored events
 * after `after_seq`, then live ones; `pong` for `ping`; a `user_action` is
 * stored once per `client_id` as a user message. Close code 4004 for another
 * conversation. Tests drop its connections and send it raw frames.
 */
export class ProtocolServer {
  readonly log: LoggedEvent[] = [];
  readonly connections: ServerConnection[] = [];
  readonly #wss: WebSocketServer;
  readonly #conversationId: string;
  readonly #replayBefore: number;
  readonly #clientIds = new Set<string>();

  private constructor(wss: WebSocketServer, options: ProtocolServerOptions) {
    this.#wss = wss;
    this.#conversationId = options.conversationId ?? 'conv-1';
    this.#replayBefore = options.replayBefore ?? 0;
    for (let i = 0; i < (options.events ?? 0); i++) this.#store('agent', `stored ${i}`);
    wss.on('connection', (socket, request) => this.#accept(socket, request.url ?? '/'));
  }

  static async start(options: ProtocolServerOptions = {}): Promise<ProtocolServer> {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise((resolve) => wss.once('listening', resolve));
    return new ProtocolServer(wss, options);
  }

  /** `ws://127.0.0.1:<port>/ws` */
  get url(): string {
    return `ws://127.0.0.1:${(this.#wss.address() as AddressInfo).port}/ws`;
  }

  /** Stores `count` agent messages and sends them to every connected client. */
  append(count: number): void {
    for (let i = 0; i < count; i++) this.#store('agent', `appended ${this.log.length}`);
  }

  /** Every frame the server received, on any connection, in order per connection. */
  received(): Array<Record<string, unknown>> {
    return this.connections.flatMap((c) => c.received);
  }

  async close(): Promise<void> {
    for (const { socket } of this.connections) socket.terminate();
    await new Promise((resolve) => this.#wss.close(resolve));
  }

  #accept(socket: WebSocket, path: string): void {
    const query = new URL(path, 'http://localhost').searchParams;
    const connection: ServerConnection = { socket, query, received: [] };
    this.connections.push(connection);
    socket.on('message', (data) => {
      connection.received.push(JSON.parse((data as Buffer).toString('utf8')) as Record<string, unknown>);
      this.#answer(connection);
    });
    if (query.get('conversation_id') !== this.#conversationId) return socket.close(4004, 'unknown conversation');
    const afterSeq = Number(query.get('after_seq') ?? 0);
    const through = this.log.at(-1)?.seq ?? 0;
    socket.send(
      JSON.stringify({ type: 'sync', conversation_id: this.#conversationId, through_seq: through, state: 'running' }),
    );
    for (const logged of this.log) if (logged.seq > afterSeq - this.#replayBefore) this.#sendEvent(socket, logged);
  }

  #answer(connection: ServerConnection): void {
    const frame = connection.received.at(-1)!;
    if (frame.type === 'ping') connection.socket.send('{"type":"pong"}');
    if (frame.type === 'user_action') {
      const clientId = String(frame.client_id);
      if (this.#clientIds.has(clientId)) return;
      this.#clientIds.add(clientId);
      this.#store('user', (frame.action as { content: string }).content);
    }
  }

  #store(source: 'user' | 'agent', content: string): void {
    const id = this.log.length;
    const event: StoredEvent = {
      v: 1,
      id,
      conversation_id: this.#conversationId,
      ts: new Date(Date.UTC(2025, 0, 1, 0, 0, id)).toISOString(),
      source,
      type: 'message',
      data: { content },
    };
    const logged = { seq: id + 1, event };
    this.log.push(logged);
    for (const { socket } of this.connections) if (socket.readyState === socket.OPEN) this.#sendEvent(socket, logged);
  }

  #sendEvent(socket: WebSocket, logged: LoggedEvent): void {
    socket.send(JSON.stringify({ type: 'event', seq: logged.seq, event: logged.event }));
  }
}
