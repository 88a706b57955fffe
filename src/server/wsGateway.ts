import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { errorFields, type Logger } from '../logger.ts';
import { ClientFrame, ConversationId, eventBytes, type LoggedEvent, type ServerFrame } from '../protocol/index.ts';
import { ConversationNotFoundError, type SessionManager } from '../session/index.ts';
import type { Authenticate } from './auth.ts';
import { formatZodError, toPublicError } from './errorMapping.ts';

export const CLOSE = {
  goingAway: 1001,
  policy: 1008,
  tooLarge: 1009,
  internal: 1011,
  slowConsumer: 1013,
  unauthenticated: 4001,
  badRequest: 4000,
  unknownConversation: 4004,
  tooManyConnections: 4029,
} as const;

export interface WsGatewayOptions {
  manager: SessionManager;
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
}

const CLIENT_FRAME_TYPES = new Set(['user_action', 'ping']);
const DEFAULT_MAX_PENDING_BYTES = 8 * 1024 * 1024;

/**
 * One `event` frame per stored event, however many clients receive it, built
 * from the event's stored bytes and shared by every socket that sends it (ws
 * sends a Buffer as it is; a string would be encoded again per socket).
 */
const frames = new WeakMap<LoggedEvent, Buffer>();
const FRAME_END = Buffer.from('}');
/** Events at least this large go out as a fragmented message instead of a copy. */
const FRAGMENT_FROM_BYTES = 64 * 1024;

function sendEventFrame(ws: WebSocket, logged: LoggedEvent): void {
  const body = eventBytes(logged.event);
  const head = `{"type":"event","seq":${logged.seq},"event":`;
  if (body.length >= FRAGMENT_FROM_BYTES) {
    // One message in three fragments (RFC 6455 §5.4), the middle one the stored
    // bytes themselves: a command's large output is not copied again per frame.
    ws.send(head, { fin: false });
    ws.send(body, { binary: false, fin: false });
    ws.send(FRAME_END, { binary: false, fin: true });
    return;
  }
  let frame = frames.get(logged);
  if (frame === undefined) {
    frame = Buffer.concat([Buffer.from(head), body, FRAME_END]);
    frames.set(logged, frame);
  }
  ws.send(frame, { binary: false });
}

/**
 * The WebSocket endpoint: `GET /ws?conversation_id=ID&after_seq=N`. A client
 * gets `sync`, then every stored event after its cursor exactly once and in
 * order (history, then live), whatever happens while it catches up.
 */
export class WsGateway {
  readonly #wss: WebSocketServer;
  readonly #options: WsGatewayOptions;

  constructor(options: WsGatewayOptions) {
    this.#options = options;
    this.#wss = new WebSocketServer({ noServer: true, maxPayload: options.maxFrameBytes, perMessageDeflate: false });
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
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/ws') {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
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
    const { manager } = this.#options;
    const early: Array<[RawData, boolean]> = [];
    let onFrame: ((data: RawData, isBinary: boolean) => void) | null = null;
    let unsubscribe: (() => void) | null = null;
    this.#alive.add(ws);
    ws.on('pong', () => this.#alive.add(ws));
    const allow = frameLimiter(this.#options.framesPerSecond ?? 100, this.#options.frameBurst ?? 200);
    let refused = 0;
    ws.on('message', (data, isBinary) => {
      this.#alive.add(ws);
      if (!allow()) {
        // Over the rate: the frame is dropped with an error; a client that keeps going is closed.
        refused += 1;
        if (refused > (this.#options.frameBurst ?? 200)) return ws.close(CLOSE.policy, 'too many frames');
        return send(ws, { type: 'error', code: 'RATE_LIMITED', message: 'too many frames: this one was dropped, slow down' });
      }
      refused = 0;
      if (onFrame) onFrame(data, isBinary);
      else early.push([data, isBinary]);
    });
    let counted: string | null = null;
    ws.on('close', () => {
      unsubscribe?.();
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

    let session;
    try {
      session = await manager.connect(conversationId, user);
    } catch (err) {
      if (err instanceof ConversationNotFoundError) return ws.close(CLOSE.unknownConversation, 'unknown conversation');
      throw err;
    }
    if (ws.readyState !== ws.OPEN) return;

    // Subscribe first and buffer, then read the high-water mark: an event
    // stored meanwhile is either in the history read or in the buffer.
    let cursor = afterSeq;
    let buffer: LoggedEvent[] | null = [];
    const maxPending = this.#options.maxPendingBytes ?? DEFAULT_MAX_PENDING_BYTES;
    const sendEvent = (logged: LoggedEvent) => {
      if (logged.seq <= cursor || ws.readyState !== ws.OPEN) return;
      cursor = logged.seq;
      sendEventFrame(ws, logged);
      // A client that stops reading must not make the server buffer without bound.
      // It reconnects with its cursor and loses nothing.
      if (ws.bufferedAmount > maxPending) {
        unsubscribe?.();
        ws.close(CLOSE.slowConsumer, 'slow consumer: reconnect with your cursor');
      }
    };
    unsubscribe = manager.subscribe(conversationId, {
      event: (logged) => (buffer ? buffer.push(logged) : sendEvent(logged)),
      status: (frame) => send(ws, frame),
    });
    const throughSeq = session.lastSeq;
    send(ws, { type: 'sync', conversation_id: conversationId, through_seq: throughSeq, state: session.state });
    // History is sent at the pace the client reads it: wait for the socket to
    // drain instead of treating a reading client as slow.
    const pageSize = this.#options.replayPageSize ?? 100;
    let replaying = true;
    while (replaying && cursor < throughSeq && ws.readyState === ws.OPEN) {
      const page = await manager.events(conversationId, user, { afterSeq: cursor, limit: pageSize });
      for (const logged of page.items) {
        if (logged.seq > throughSeq) break;
        if (ws.bufferedAmount > maxPending / 2 && !(await drained(ws, maxPending / 4))) {
          ws.close(CLOSE.slowConsumer, 'slow consumer: reconnect with your cursor');
          return;
        }
        sendEvent(logged);
      }
      replaying = page.hasMore && page.items.length > 0;
    }
    const buffered = buffer;
    buffer = null;
    for (const logged of buffered) sendEvent(logged);

    let actions: Promise<unknown> = Promise.resolve();
    onFrame = (data, isBinary) => {
      const frame = this.#parse(ws, data, isBinary);
      if (frame?.type === 'ping') send(ws, { type: 'pong' });
      else if (frame?.type === 'user_action') {
        // One connection's actions are stored in the order it sent them.
        actions = actions.then(() =>
          manager.act(conversationId, user, frame.action, frame.client_id).catch((err: unknown) => {
            const pub = toPublicError(err);
            if (pub.status >= 500) this.#options.logger.error('action failed', { conversation_id: conversationId, ...errorFields(err) });
            send(ws, { type: 'error', code: pub.code, message: pub.message });
          }),
        );
      }
    };
    for (const [data, isBinary] of early.splice(0)) onFrame(data, isBinary);
  }

  #count(conversationId: string, delta: number): void {
    const n = (this.#perConversation.get(conversationId) ?? 0) + delta;
    if (n <= 0) this.#perConversation.delete(conversationId);
    else this.#perConversation.set(conversationId, n);
  }

  /** A valid client frame, or null after telling the client what was wrong. */
  #parse(ws: WebSocket, data: RawData, isBinary: boolean): ClientFrame | null {
    const fail = (code: string, message: string) => {
      send(ws, { type: 'error', code, message });
      return null;
    };
    if (isBinary) return fail('BAD_FRAME', 'binary frames are not supported: send JSON text frames');
    let value: unknown;
    try {
      value = JSON.parse(rawText(data));
    } catch {
      return fail('BAD_JSON', 'the frame is not valid JSON');
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value) || typeof (value as { type?: unknown }).type !== 'string') {
      return fail('BAD_FRAME', 'every frame is a JSON object with a string "type"');
    }
    const type = (value as { type: string }).type;
    if (!CLIENT_FRAME_TYPES.has(type)) {
      return fail('UNKNOWN_FRAME_TYPE', `unknown frame type ${JSON.stringify(type.slice(0, 64))}: expected user_action or ping`);
    }
    const parsed = ClientFrame.safeParse(value);
    return parsed.success ? parsed.data : fail('BAD_FRAME', formatZodError(parsed.error));
  }
}

const DRAIN_STALL_MS = 30_000;

/** A token bucket: `rate` frames a second, at most `burst` at once. */
function frameLimiter(rate: number, burst: number): () => boolean {
  let tokens = burst;
  let last = Date.now();
  return () => {
    const now = Date.now();
    tokens = Math.min(burst, tokens + ((now - last) / 1000) * rate);
    last = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  };
}

/** Waits until at most `low` bytes are queued; false when the socket closed or made no progress for 30 s. */
async function drained(ws: WebSocket, low: number): Promise<boolean> {
  let last = ws.bufferedAmount;
  let progressAt = Date.now();
  while (ws.readyState === ws.OPEN && ws.bufferedAmount > low) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    if (ws.bufferedAmount < last) {
      last = ws.bufferedAmount;
      progressAt = Date.now();
    } else if (Date.now() - progressAt > DRAIN_STALL_MS) {
      return false;
    }
  }
  return ws.readyState === ws.OPEN;
}

function send(ws: WebSocket, frame: ServerFrame): void {
  if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(frame));
}

function rawText(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8');
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data).toString('utf8');
}

function parseCursor(value: string | null): number | null {
  if (value === null || value === '') return 0;
  if (!/^\d{1,15}$/.test(value)) return null;
  return Number(value);
}
