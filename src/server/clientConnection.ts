import { type RawData, type WebSocket } from 'ws';
import { errorFields } from '../logger.ts';
import { ClientFrame, eventBytes, type LoggedEvent, type ServerFrame, type StatusFrame } from '../../protocol/index.ts';
import type { ConnectPoint, FeedListener } from '../host/index.ts';
import { formatZodError, toPublicError } from './errorMapping.ts';
import type { WsGatewayOptions } from './wsGateway.ts';

/** The close codes of the contract (docs/protocol.md). */
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
 * One client's connection to one conversation: its cursor, its frame budget and
 * its actions, in order. Its methods are shared by every connection, so an idle
 * connection (its session hibernated) costs its fields and little else.
 */
export class ClientConnection implements FeedListener {
  readonly #ws: WebSocket;
  readonly #options: WsGatewayOptions;
  #tokens: number;
  #refilledAt = Date.now();
  #refused = 0;
  /** Frames that came before the connection was set up; null once it is. */
  #early: Array<[RawData, boolean]> | null = [];
  #conversationId = '';
  #user = '';
  #cursor = 0;
  /** The id of the last event the client has: the next one must be this plus one, or events were missed. */
  #lastEventId = -1;
  /** Live events that came while history is sent (at the start, or to fill a gap); null when none is. */
  #buffer: LoggedEvent[] | null = [];
  #unsubscribe: (() => void) | null = null;
  #stopped = false;
  /** A resync asked for while history was being sent: it runs once that is done. */
  #resyncAfter = false;
  /** Status frames that came before `sync` (which is the first frame a client gets); null once it is sent. */
  #heldStatus: StatusFrame[] | null = [];
  #actions: Promise<unknown> = Promise.resolve();

  constructor(ws: WebSocket, options: WsGatewayOptions) {
    this.#ws = ws;
    this.#options = options;
    this.#tokens = options.frameBurst ?? 200;
  }

  /**
   * Subscribes first and buffers, then reads where the conversation stands
   * (the high-water mark; a missing or foreign conversation rejects with
   * ConversationNotFoundError): the feed delivers every event stored once the
   * subscription is made, so an event stored meanwhile is either in the
   * history read or in the buffer. Then `sync`, the history in pages, the
   * buffer, and the frames that waited.
   */
  async start(conversationId: string, user: string, afterSeq: number): Promise<void> {
    const ws = this.#ws;
    this.#conversationId = conversationId;
    this.#user = user;
    this.#cursor = afterSeq;
    const unsubscribe = await this.#options.manager.subscribe(conversationId, this);
    if (this.#stopped) return unsubscribe();
    this.#unsubscribe = unsubscribe;
    let at: ConnectPoint;
    try {
      at = await this.#options.manager.connect(conversationId, user);
    } catch (err) {
      this.stop();
      throw err;
    }
    if (this.#stopped) return;
    send(ws, { type: 'sync', conversation_id: conversationId, through_seq: at.throughSeq, state: at.state });
    const held = this.#heldStatus ?? [];
    this.#heldStatus = null;
    for (const frame of held) send(ws, frame);
    if (!(await this.#sendHistory(at.throughSeq))) return;
    // Caught up to the high-water mark: the client has the event at it.
    if (this.#cursor >= at.throughSeq) this.#lastEventId = Math.max(this.#lastEventId, at.lastEventId);
    this.#flush();
    const early = this.#early ?? [];
    this.#early = null;
    for (const [data, isBinary] of early) this.#handle(data, isBinary);
  }

  /** A frame from the client: within its budget it is handled (or kept until the connection is set up). */
  receive(data: RawData, isBinary: boolean): void {
    if (!this.#allow()) {
      // Over the rate: the frame is dropped with an error; a client that keeps going is closed.
      this.#refused += 1;
      if (this.#refused > (this.#options.frameBurst ?? 200)) return this.#ws.close(CLOSE.policy, 'too many frames');
      return send(this.#ws, {
        type: 'error',
        code: 'RATE_LIMITED',
        message: 'too many frames: this one was dropped, slow down',
      });
    }
    this.#refused = 0;
    if (this.#early) this.#early.push([data, isBinary]);
    else this.#handle(data, isBinary);
  }

  /** The socket closed: no more events. */
  stop(): void {
    this.#stopped = true;
    this.#unsubscribe?.();
    this.#unsubscribe = null;
  }

  event(logged: LoggedEvent): void {
    if (this.#buffer) this.#buffer.push(logged);
    else this.#live(logged);
  }

  /** The feed may have missed events (its follow started only now): the log gives what came after the cursor. */
  resync(): void {
    if (this.#stopped) return;
    if (this.#buffer) {
      this.#resyncAfter = true;
      return;
    }
    this.#buffer = [];
    void this.#fillGap();
  }

  /**
   * A live event: sent when it is the next one. One that skips an event id
   * means the feed missed some (it fell behind, or started again past them):
   * the client gets them from the log first, then the live ones again.
   */
  #live(logged: LoggedEvent): void {
    if (logged.seq <= this.#cursor) {
      this.#lastEventId = Math.max(this.#lastEventId, logged.event.id);
      return;
    }
    if (logged.event.id <= this.#lastEventId + 1 || this.#lastEventId < 0) return this.#send(logged);
    this.#buffer = [logged];
    void this.#fillGap();
  }

  async #fillGap(): Promise<void> {
    try {
      if (await this.#sendHistory(Number.MAX_SAFE_INTEGER)) this.#flush();
    } catch (err) {
      this.#options.logger.error('filling a gap in the live feed failed', {
        conversation_id: this.#conversationId,
        ...errorFields(err),
      });
      this.stop();
      this.#ws.close(CLOSE.internal, 'internal error: reconnect with your cursor');
    }
  }

  /** Sends what was buffered while history went out; a gap among it starts another fill (and buffers the rest). */
  #flush(): void {
    const buffered = this.#buffer ?? [];
    this.#buffer = null;
    for (const logged of buffered) this.event(logged);
    if (this.#resyncAfter && !this.#buffer) {
      this.#resyncAfter = false;
      this.resync();
    }
  }

  /**
   * Sends the stored events after the cursor up to `throughSeq`, in pages, at
   * the pace the client reads them: it waits for the socket to drain instead
   * of treating a reading client as slow. False when the client was closed.
   */
  async #sendHistory(throughSeq: number): Promise<boolean> {
    const ws = this.#ws;
    const maxPending = this.#maxPending();
    const pageSize = this.#options.replayPageSize ?? 100;
    for (;;) {
      if (this.#cursor >= throughSeq || ws.readyState !== ws.OPEN) return ws.readyState === ws.OPEN;
      const page = await this.#options.manager.events(this.#conversationId, this.#user, {
        afterSeq: this.#cursor,
        limit: pageSize,
      });
      for (const logged of page.items) {
        if (logged.seq > throughSeq) return true;
        if (ws.bufferedAmount > maxPending / 2 && !(await drained(ws, maxPending / 4))) {
          this.stop();
          ws.close(CLOSE.slowConsumer, 'slow consumer: reconnect with your cursor');
          return false;
        }
        this.#send(logged);
      }
      if (!page.hasMore || page.items.length === 0) return ws.readyState === ws.OPEN;
    }
  }

  status(frame: StatusFrame): void {
    if (this.#heldStatus) this.#heldStatus.push(frame);
    else send(this.#ws, frame);
  }

  #send(logged: LoggedEvent): void {
    const ws = this.#ws;
    if (logged.seq <= this.#cursor || ws.readyState !== ws.OPEN) return;
    this.#cursor = logged.seq;
    this.#lastEventId = logged.event.id;
    sendEventFrame(ws, logged);
    // A client that stops reading must not make the server buffer without bound.
    // It reconnects with its cursor and loses nothing.
    if (ws.bufferedAmount > this.#maxPending()) {
      this.stop();
      ws.close(CLOSE.slowConsumer, 'slow consumer: reconnect with your cursor');
    }
  }

  #handle(data: RawData, isBinary: boolean): void {
    const frame = parseFrame(this.#ws, data, isBinary);
    if (frame?.type === 'ping') send(this.#ws, { type: 'pong' });
    else if (frame?.type === 'user_action') {
      // One connection's actions are stored in the order it sent them.
      this.#actions = this.#actions.then(() => this.#act(frame));
    }
  }

  async #act(frame: Extract<ClientFrame, { type: 'user_action' }>): Promise<void> {
    try {
      await this.#options.manager.act(this.#conversationId, this.#user, frame.action, frame.client_id);
    } catch (err) {
      const pub = toPublicError(err);
      if (pub.status >= 500)
        this.#options.logger.error('action failed', { conversation_id: this.#conversationId, ...errorFields(err) });
      send(this.#ws, { type: 'error', code: pub.code, message: pub.message });
    }
  }

  /** A token bucket: `framesPerSecond` frames a second, at most `frameBurst` at once. */
  #allow(): boolean {
    const rate = this.#options.framesPerSecond ?? 100;
    const now = Date.now();
    this.#tokens = Math.min(this.#options.frameBurst ?? 200, this.#tokens + ((now - this.#refilledAt) / 1000) * rate);
    this.#refilledAt = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  #maxPending(): number {
    return this.#options.maxPendingBytes ?? DEFAULT_MAX_PENDING_BYTES;
  }
}

/** A valid client frame, or null after telling the client what was wrong. */
function parseFrame(ws: WebSocket, data: RawData, isBinary: boolean): ClientFrame | null {
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
  if (
    typeof value !== 'object' ||
    value === null ||
    Array.isArray(value) ||
    typeof (value as { type?: unknown }).type !== 'string'
  ) {
    return fail('BAD_FRAME', 'every frame is a JSON object with a string "type"');
  }
  const type = (value as { type: string }).type;
  if (!CLIENT_FRAME_TYPES.has(type)) {
    return fail(
      'UNKNOWN_FRAME_TYPE',
      `unknown frame type ${JSON.stringify(type.slice(0, 64))}: expected user_action or ping`,
    );
  }
  const parsed = ClientFrame.safeParse(value);
  return parsed.success ? parsed.data : fail('BAD_FRAME', formatZodError(parsed.error));
}

const DRAIN_STALL_MS = 30_000;

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
