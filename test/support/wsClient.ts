import WebSocket from 'ws';
import { ServerFrame } from '../../protocol/index.ts';
import { protocolClient, type InvalidFrame, type ProtocolClient } from '../../src/client/index.ts';

export type Frame = ServerFrame;
export type EventFrame = Extract<Frame, { type: 'event' }>;
export type SyncFrame = Extract<Frame, { type: 'sync' }>;

export interface CloseInfo {
  code: number;
  reason: string;
}

const DEFAULT_TIMEOUT_MS = 15_000;

export interface WsClientOptions {
  /** Keep every frame's text as received (`raw`), for byte-level checks. */
  keepRaw?: boolean;
}

/** `ws`'s WebSocket as the tests open it: without permessage-deflate (the server refuses it anyway). */
class TestSocket extends WebSocket {
  constructor(url: string) {
    super(url, { perMessageDeflate: false });
  }
}

/**
 * A recording WebSocket client for end-to-end tests, on the protocol client
 * (src/client/) with the strict check: every server frame is parsed,
 * checked against the protocol's ServerFrame schema and kept in arrival
 * order; frames that fail the schema or break the order (an event at or
 * before the cursor, before `sync`) are kept in `invalid` too, so a test can
 * assert there were none. One socket: it does not reconnect (tests open the
 * next one themselves, with their cursor).
 */
export class WsClient {
  readonly url: string;
  /** The `ws` socket itself: for tests that pause reading or send bytes the protocol client would not. */
  readonly socket: WebSocket;
  /** Every frame, in arrival order (schema-valid or not, as parsed JSON). */
  readonly frames: Frame[] = [];
  /** Every frame's text as received, when the client was opened with `keepRaw` (else empty). */
  readonly raw: string[] = [];
  /** Frames that were not JSON, did not match ServerFrame or broke the order, with the reason. */
  readonly invalid: Array<{ raw: string; problem: string }> = [];
  /** Resolves when the socket is closed, with the close code and reason. */
  readonly closed: Promise<CloseInfo>;
  /** Resolves on open; rejects if the socket closes or fails first. */
  readonly opened: Promise<void>;
  readonly #client: ProtocolClient<WebSocket>;
  #closeInfo: CloseInfo | null = null;
  #cursor = 0;
  #waiters = new Set<() => void>();

  readonly #keepRaw: boolean;

  private constructor(url: string, options: WsClientOptions) {
    this.url = url;
    this.#keepRaw = options.keepRaw ?? false;
    let opened!: { resolve: () => void; reject: (err: Error) => void };
    this.opened = new Promise((resolve, reject) => (opened = { resolve, reject }));
    this.opened.catch(() => undefined);
    let closed!: (info: CloseInfo) => void;
    this.closed = new Promise((resolve) => (closed = resolve));
    const record = (frame: Frame, raw: string) => this.#record(frame, raw);
    this.#client = protocolClient({
      WebSocket: TestSocket,
      url,
      reconnect: false,
      check: (value) => ServerFrame.safeParse(value),
      handlers: {
        open: () => opened.resolve(),
        // A refused connection or a reset reports an error before the close; the close is what tests look at.
        socketError: (event) => opened.reject(socketError(event)),
        sync: record,
        event: record,
        status: record,
        delta: record,
        error: record,
        pong: record,
        invalid: (frame) => this.#recordInvalid(frame),
        close: ({ code, reason }) => {
          opened.reject(new Error(`closed before open (code ${code})`));
          this.#closeInfo = { code, reason };
          closed(this.#closeInfo);
          this.#wake();
        },
      },
    });
    this.socket = this.#client.socket!;
  }

  /** Opens a socket and waits until it is open. */
  static async connect(url: string, options: WsClientOptions = {}): Promise<WsClient> {
    const client = new WsClient(url, options);
    await client.opened;
    return client;
  }

  /** Starts opening a socket without waiting (for tests about refused or closed connections). */
  static open(url: string, options: WsClientOptions = {}): WsClient {
    return new WsClient(url, options);
  }

  get isOpen(): boolean {
    return this.socket.readyState === WebSocket.OPEN;
  }

  get closeInfo(): CloseInfo | null {
    return this.#closeInfo;
  }

  /** The event frames received so far. */
  events(): EventFrame[] {
    return this.frames.filter((f): f is EventFrame => f.type === 'event');
  }

  seqs(): number[] {
    return this.events().map((f) => f.seq);
  }

  /** The highest seq seen so far, or `fallback` when no event arrived. */
  lastSeq(fallback = 0): number {
    const events = this.events();
    return events.length > 0 ? events[events.length - 1]!.seq : fallback;
  }

  /** Sends a JSON frame now (objects are stringified; strings are sent as they are, bad ones too). */
  send(frame: unknown): void {
    const sent = this.#client.sendRaw(typeof frame === 'string' ? frame : JSON.stringify(frame));
    // As ws's own send: an error before the socket opened, nothing once it closed.
    if (!sent && this.socket.readyState === WebSocket.CONNECTING) throw new Error(`${this.url}: not open yet`);
  }

  /** Sends bytes as a binary frame, on the `ws` socket itself: the protocol has none. */
  sendBinary(data: Buffer): void {
    this.socket.send(data, { binary: true });
  }

  sendMessage(content: string, clientId?: string): void {
    this.send({ type: 'user_action', action: { type: 'message', content }, ...(clientId && { client_id: clientId }) });
  }

  /**
   * The first recorded frame (from index `from`, default 0) that matches, waiting for it
   * when needed. Rejects on timeout or when the socket closes without one.
   */
  waitFor<T extends Frame = Frame>(
    predicate: (frame: Frame) => boolean,
    options: { timeoutMs?: number; from?: number; what?: string } = {},
  ): Promise<T> {
    const { timeoutMs = DEFAULT_TIMEOUT_MS, from = 0, what = 'a matching frame' } = options;
    return this.#until(
      () => {
        for (let i = from; i < this.frames.length; i++) if (predicate(this.frames[i]!)) return this.frames[i] as T;
        return undefined;
      },
      timeoutMs,
      what,
    );
  }

  /** Waits until `condition()` holds (re-checked on every frame and on close). */
  waitUntil(condition: () => boolean, options: { timeoutMs?: number; what?: string } = {}): Promise<void> {
    const { timeoutMs = DEFAULT_TIMEOUT_MS, what = 'a condition' } = options;
    return this.#until(() => (condition() ? true : undefined), timeoutMs, what).then(() => undefined);
  }

  /** The next frame of this type after the last one `next` returned. */
  async next<K extends Frame['type']>(type: K, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<Extract<Frame, { type: K }>> {
    const index = await this.#until(
      () => {
        for (let i = this.#cursor; i < this.frames.length; i++) if (this.frames[i]!.type === type) return i;
        return undefined;
      },
      timeoutMs,
      `a ${type} frame`,
    );
    this.#cursor = index + 1;
    return this.frames[index] as Extract<Frame, { type: K }>;
  }

  /**
   * A round trip: sends ping and waits for a pong that came after it. The server answers
   * in order, so every frame it sent before the pong has been recorded when this resolves.
   */
  async roundTrip(timeoutMs = DEFAULT_TIMEOUT_MS): Promise<void> {
    const from = this.frames.length;
    this.send({ type: 'ping' });
    await this.waitFor((f) => f.type === 'pong', { from, timeoutMs, what: 'a pong' });
  }

  /** Closes cleanly and waits for the close. */
  async close(code = 1000): Promise<CloseInfo> {
    if (this.socket.readyState === WebSocket.CONNECTING) this.socket.terminate();
    else if (this.socket.readyState === WebSocket.OPEN) this.#client.close(code);
    return this.closed;
  }

  /** Drops the connection abruptly (no close handshake), as a lost network would. */
  async terminate(): Promise<CloseInfo> {
    this.socket.terminate();
    return this.closed;
  }

  #record(frame: Frame, raw: string): void {
    if (this.#keepRaw) this.raw.push(raw);
    this.frames.push(frame);
    this.#wake();
  }

  #recordInvalid({ raw, problem, value }: InvalidFrame): void {
    if (this.#keepRaw) this.raw.push(raw);
    this.invalid.push({ raw, problem });
    if (value === undefined) return;
    this.frames.push(value as Frame);
    this.#wake();
  }

  #wake(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }

  #until<T>(check: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const attempt = () => {
        let found: T | undefined;
        try {
          found = check();
        } catch (err) {
          finish();
          reject(err instanceof Error ? err : new Error(String(err)));
          return;
        }
        if (found !== undefined) {
          finish();
          resolve(found);
        } else if (this.#closeInfo) {
          finish();
          reject(
            new Error(
              `${this.url}: closed (${this.#closeInfo.code} ${this.#closeInfo.reason}) before ${what}; ${this.#summary()}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`${this.url}: no ${what} within ${timeoutMs} ms; ${this.#summary()}`));
      }, timeoutMs);
      const finish = () => {
        clearTimeout(timer);
        this.#waiters.delete(attempt);
      };
      this.#waiters.add(attempt);
      attempt();
    });
  }

  #summary(): string {
    const last = this.frames.slice(-3).map((f) => JSON.stringify(f).slice(0, 300));
    return `${this.frames.length} frames so far, last: ${last.join(' | ') || 'none'}`;
  }
}

/** `ws://host:port/ws?conversation_id=ID[&after_seq=N]` */
export function wsUrlFor(wsUrl: string, conversationId: string, afterSeq?: number): string {
  const url = new URL(wsUrl);
  url.searchParams.set('conversation_id', conversationId);
  if (afterSeq !== undefined) url.searchParams.set('after_seq', String(afterSeq));
  return url.toString();
}

/** What a socket's error event says: `ws` gives the Error (a refused handshake's "Unexpected server response: 404"). */
function socketError(event: unknown): Error {
  const error = (event as { error?: unknown }).error;
  if (error instanceof Error) return error;
  const message = (event as { message?: unknown }).message;
  return new Error(typeof message === 'string' ? message : 'socket error');
}
