import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type ServerOptions, type WebSocket } from 'ws';
import { errorFields, type Logger } from '../logger.ts';
import { ConversationId } from '../../protocol/index.ts';
import { ConversationNotFoundError } from '../errors.ts';
import type { HostPorts } from './server.ts';
import { foreignOrigin } from './origin.ts';
import { allowsHost, foreignHostMessage } from './hostCheck.ts';
import type { Authenticate } from './auth.ts';
import { ClientConnection, CLOSE } from './clientConnection.ts';

export { CLOSE } from './clientConnection.ts';

export interface WsGatewayOptions extends HostPorts {
  logger: Logger;
  maxFrameBytes: number;
  /** Bytes queued for one client beyond which it is closed with 1013 (default 8 MiB). */
  maxPendingBytes?: number;
  authenticate: Authenticate;
  /** Events per history page sent while a client catches up. */
  replayPageSize?: number;
  /** Frames a connection may send per second (the bucket refills at this rate). */
  framesPerSecond?: number;
  /** Frames a connection may send at once. */
  frameBurst?: number;
  /** Connections to one conversation; one more is closed with 4029. */
  maxConnectionsPerConversation?: number;
  /** The server pings every this many ms; a peer that has not answered the previous ping is dropped. */
  pingIntervalMs?: number;
  /** After the server closes a connection, how long it waits for the peer's close frame before it drops the socket. */
  closeTimeoutMs?: number;
  /** Names a handshake's `Host` must have (besides loopback ones, see `allowsHost`); absent: any. */
  allowedHosts?: readonly string[];
}

/**
 * The WebSocket endpoint: `GET /ws?conversation_id=ID&after_seq=N`. A client
 * gets `sync`, then every stored event after its cursor exactly once and in
 * order (history, then live), whatever happens while it catches up.
 */
export class WsGateway {
  readonly #wss: WebSocketServer;
  readonly #options: WsGatewayOptions;
  readonly #hostAllowed: ((host: string | undefined) => boolean) | undefined;

  constructor(options: WsGatewayOptions) {
    this.#options = options;
    this.#hostAllowed = options.allowedHosts && allowsHost(options.allowedHosts);
    // ws 8.23 takes `closeTimeout`; @types/ws 8.18 does not list it yet.
    const serverOptions: ServerOptions & { closeTimeout: number } = {
      noServer: true,
      maxPayload: options.maxFrameBytes,
      perMessageDeflate: false,
      closeTimeout: options.closeTimeoutMs ?? 30_000,
    };
    this.#wss = new WebSocketServer(serverOptions);
    this.#heartbeat = setInterval(() => this.#ping(), options.pingIntervalMs ?? 30_000);
    this.#heartbeat.unref();
  }

  readonly #heartbeat: NodeJS.Timeout;
  readonly #alive = new WeakSet<WebSocket>();
  readonly #perConversation = new Map<string, number>();

  /** A peer that did not answer the last ping is gone (within two intervals of its last sign of life). */
  #ping(): void {
    for (const ws of this.#wss.clients) {
      if (!this.#alive.has(ws)) {
        ws.terminate();
        continue;
      }
      this.#alive.delete(ws);
      ws.ping();
    }
  }

  get clientCount(): number {
    return this.#wss.clients.size;
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.#hostAllowed && !this.#hostAllowed(req.headers.host)) {
      const body = JSON.stringify({ error: { code: 'FOREIGN_HOST', message: foreignHostMessage(req.headers.host) } });
      socket.end(
        'HTTP/1.1 403 Forbidden\r\nContent-Type: application/json; charset=utf-8\r\n' +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      return;
    }
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/ws') {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
      return;
    }
    if (foreignOrigin(req)) {
      socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n');
      return;
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) => {
      void this.#accept(ws, req, url).catch((err) => {
        this.#options.logger.error('ws connection failed', errorFields(err));
        ws.close(CLOSE.internal, 'internal error');
      });
    });
  }

  /** Closes every connection with 1001 (going away). */
  close(): Promise<void> {
    clearInterval(this.#heartbeat);
    for (const ws of this.#wss.clients) ws.close(CLOSE.goingAway, 'server going away');
    return new Promise((resolve) => this.#wss.close(() => resolve()));
  }

  async #accept(ws: WebSocket, req: IncomingMessage, url: URL): Promise<void> {
    const client = new ClientConnection(ws, this.#options);
    this.#alive.add(ws);
    ws.on('pong', () => this.#alive.add(ws));
    ws.on('message', (data, isBinary) => {
      this.#alive.add(ws);
      client.receive(data, isBinary);
    });
    let counted: string | null = null;
    ws.on('close', () => {
      client.stop();
      if (counted !== null) this.#count(counted, -1);
    });
    ws.on('error', (err) => this.#options.logger.warn('ws error', errorFields(err)));

    const user = await this.#options.authenticate(req, url);
    if (user === null) return ws.close(CLOSE.unauthenticated, 'unauthenticated');
    const id = ConversationId.safeParse(url.searchParams.get('conversation_id'));
    if (!id.success) return ws.close(CLOSE.unknownConversation, 'unknown conversation');
    const afterSeq = parseCursor(url.searchParams.get('after_seq'));
    if (afterSeq === null) return ws.close(CLOSE.badRequest, 'after_seq must be a non-negative integer');
    const conversationId = id.data;
    if ((this.#perConversation.get(conversationId) ?? 0) >= (this.#options.maxConnectionsPerConversation ?? 32)) {
      return ws.close(CLOSE.tooManyConnections, 'too many connections to this conversation');
    }
    this.#count(conversationId, 1);
    counted = conversationId;

    try {
      // Listening starts before the conversation's high-water mark is read: nothing stored in between is missed.
      await client.start(conversationId, user, afterSeq);
    } catch (err) {
      if (err instanceof ConversationNotFoundError) return ws.close(CLOSE.unknownConversation, 'unknown conversation');
      throw err;
    }
  }

  #count(conversationId: string, delta: number): void {
    const n = (this.#perConversation.get(conversationId) ?? 0) + delta;
    if (n <= 0) this.#perConversation.delete(conversationId);
    else this.#perConversation.set(conversationId, n);
  }
}

function parseCursor(value: string | null): number | null {
  if (value === null || value === '') return 0;
  if (!/^\d{1,15}$/.test(value)) return null;
  return Number(value);
}
