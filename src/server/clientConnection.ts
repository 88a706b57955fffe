import { type RawData, type WebSocket } from 'ws';
import { errorFields } from '../logger.ts';
import { ClientFrame, eventBytes, type LoggedEvent, type ServerFrame, type StatusFrame } from '../../protocol/index.ts';
import type { ConnectPoint, FeedMember } from '../queries/index.ts';
import { DeltaCursor } from './deltaCursor.ts';
import { formatZodError, toPublicError } from './errorMapping.ts';
import { holdForTurn } from './turnCork.ts';
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
  holdForTurn(ws);
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
 * One client's connection to one conversation: a pipe from the conversation's
 * feed to its socket (`sync`, then every stored event after its cursor from
 * the log's gapless subscription, and status frames), its frame budget and
 * its actions, in order. Its methods are shared by every connection, so an
 * idle connection (its session hibernated) costs its fields and little else.
 */
export class ClientConnection {
  readonly #ws: WebSocket;
  readonly #options: WsGatewayOptions;
  #tokens: number;
  #refilledAt = Date.now();
  #refused = 0;
  /** Frames that came before the connection was set up; null once it is. */
  #early: Array<[RawData, boolean]> | null = [];
  #conversationId = '';
  #user = '';
  #member: FeedMember | null = null;
  #stopped = false;
  /** Status frames that came before `sync` (which is the first frame a client gets); null once it is sent. */
  #heldStatus: StatusFrame[] | null = [];
  /** Which deltas of the agent's reply under way this client has had. */
  readonly #deltaCursor = new DeltaCursor();
  /** The wait for the socket to drain while the client reads stored events at its own pace; null when none. */
  #pacing: Promise<void> | null = null;
  #actions: Promise<unknown> = Promise.resolve();

  constructor(ws: WebSocket, options: WsGatewayOptions) {
    this.#ws = ws;
    this.#options = options;
    this.#tokens = options.frameBurst ?? 200;
  }

  /**
   * Joins the conversation's feed (status frames from now on are held until
   * `sync`), reads where it stands (a missing or foreign conversation rejects
   * with ConversationNotFoundError), sends `sync`, then pipes every stored
   * event after the cursor: the log's subscription delivers each once and in
   * order, the stored ones at the client's pace, then live ones.
   */
  async start(conversationId: string, user: string, afterSeq: number): Promise<void> {
    const ws = this.#ws;
    this.#conversationId = conversationId;
    this.#user = user;
    if (this.#stopped) return;
    const member = (this.#member = this.#options.feed.join(conversationId, {
      status: (frame) => this.#status(frame),
      deltas: () => this.#deltas(),
    }));
    let at: ConnectPoint;
    try {
      at = await this.#options.commands.connect(conversationId, user);
    } catch (err) {
      this.stop();
      throw err;
    }
    if (this.#stopped) return;
    send(ws, { type: 'sync', conversation_id: conversationId, through_seq: at.throughSeq, state: at.state });
    this.#deltaCursor.joined(at.state, member.deltas());
    // Joined mid-reply: the deltas so far come from the owner (they may have begun before this node listened).
    if (at.state === 'running') member.catchUp();
    const statuses = this.#heldStatus ?? [];
    this.#heldStatus = null;
    for (const frame of statuses) send(ws, frame);
    const subscription = member.follow(afterSeq, {
      event: (logged) => this.#event(logged),
      failed: (err) => this.#failed(err),
    });
    // Missed events first, then the current attempt's deltas from index 0, then live ones.
    void subscription.caughtUp.then(() => {
      this.#deltaCursor.caughtUp();
      this.#deltas();
    });
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
    this.#member?.leave();
    this.#member = null;
  }

  /**
   * Sends one event. A client that stops reading must not make the server
   * buffer without bound: past the budget it is closed and reconnects with
   * its cursor, losing nothing. Past half of it the socket is given time to
   * drain (the subscription waits for that while the client catches up on
   * stored events; live events are not held back).
   */
  #event(logged: LoggedEvent): Promise<void> | undefined {
    const ws = this.#ws;
    if (this.#stopped || ws.readyState !== ws.OPEN) return undefined;
    holdForTurn(ws);
    for (const delta of this.#deltaCursor.before(logged, this.#member?.deltas() ?? null)) ws.send(delta);
    sendEventFrame(ws, logged);
    const maxPending = this.#maxPending();
    if (ws.bufferedAmount > maxPending) {
      this.#closeSlow();
      return undefined;
    }
    if (ws.bufferedAmount <= maxPending / 2) return undefined;
    this.#pacing ??= drained(ws, maxPending / 4).then((open) => {
      this.#pacing = null;
      if (!open) this.#closeSlow();
    });
    return this.#pacing;
  }

  /** The deltas of the reply under way this client has not had yet, in order (see DeltaCursor). */
  #deltas(): void {
    const ws = this.#ws;
    if (this.#stopped || ws.readyState !== ws.OPEN) return;
    holdForTurn(ws);
    for (const delta of this.#deltaCursor.due(this.#member?.deltas() ?? null)) ws.send(delta);
    if (ws.bufferedAmount > this.#maxPending()) this.#closeSlow();
  }

  #closeSlow(): void {
    this.stop();
    this.#ws.close(CLOSE.slowConsumer, 'slow consumer: reconnect with your cursor');
  }

  /** The log could not be read for this client: it reconnects with its cursor. */
  #failed(err: unknown): void {
    this.#options.logger.error('reading the log for a client failed', {
      conversation_id: this.#conversationId,
      ...errorFields(err),
    });
    this.stop();
    this.#ws.close(CLOSE.internal, 'internal error: reconnect with your cursor');
  }

  #status(frame: StatusFrame): void {
    if (this.#heldStatus) this.#heldStatus.push(frame);
    else send(this.#ws, frame);
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
      await this.#options.commands.act(this.#conversationId, this.#user, frame.action, frame.client_id);
    } catch (err) {
      const pub = toPublicError(err);
      if (pub.status >= 500)
        this.#options.logger.error('action failed', { conversation_id: this.#conversationId, ...errorFields(err) });
      // Named by the action's client_id, so a client that sent several knows which one was refused.
      const named = frame.client_id === undefined ? {} : { client_id: frame.client_id };
      send(this.#ws, { type: 'error', code: pub.code, message: pub.message, ...named });
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
  if (ws.readyState !== ws.OPEN) return;
  holdForTurn(ws);
  ws.send(JSON.stringify(frame));
}

function rawText(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8');
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data).toString('utf8');
}
