import WebSocket from 'ws';
import { ServerFrame } from '../../protocol/index.ts';

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

/**
 * A recording WebSocket client for end-to-end tests. Every server frame is
 * parsed, checked against the protocol's ServerFrame schema and kept in
 * arrival order; frames that fail the schema are kept in `invalid` too, so a
 * test can assert there were none.
 */
export class WsClient {
  readonly url: string;
  readonly socket: WebSocket;
  /** Every frame, in arrival order (schema-valid or not, as parsed JSON). */
  readonly frames: Frame[] = [];
  /** Every frame's text as received, when the client was opened with `keepRaw` (else empty). */
  readonly raw: string[] = [];
  /** Frames that were not JSON or did not match ServerFrame, with the reason. */
  readonly invalid: Array<{ raw: string; problem: string }> = [];
  /** Resolves when the socket is closed, with the close code and reason. */
  readonly closed: Promise<CloseInfo>;
  /** Resolves on open; rejects if the socket closes or fails first. */
  readonly opened: Promise<void>;
  #closeInfo: CloseInfo | null = null;
  #cursor = 0;
  #waiters = new Set<() => void>();

  readonly #keepRaw: boolean;

  private constructor(url: string, options: WsClientOptions) {
    this.url = url;
    this.#keepRaw = options.keepRaw ?? false;
    this.socket = new WebSocket(url, { perMessageDeflate: false });
    this.opened = new Promise((resolve, reject) => {
      this.socket.once('open', () => resolve());
      this.socket.once('error', reject);
      this.socket.once('close', (code) => reject(new Error(`closed before open (code ${code})`)));
    });
    this.opened.catch(() => undefined);
    this.closed = new Promise((resolve) => {
      this.socket.on('close', (code, reason) => {
        this.#closeInfo = { code, reason: reason.toString('utf8') };
        resolve(this.#closeInfo);
        this.#wake();
      });
    });
    // A refused connection or a reset emits 'error' before 'close'; the close is what tests look at.
    this.socket.on('error', () => undefined);
    this.socket.on('message', (data, isBinary) => this.#record(data, isBinary));
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

  /** Sends a JSON frame (objects are stringified; strings are sent as they are). */
  send(frame: unknown): void {
    this.socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

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
    else if (this.socket.readyState === WebSocket.OPEN) this.socket.close(code);
    return this.closed;
  }

  /** Drops the connection abruptly (no close handshake), as a lost network would. */
  async terminate(): Promise<CloseInfo> {
    this.socket.terminate();
    return this.closed;
  }

  #record(data: WebSocket.RawData, isBinary: boolean): void {
    const raw = Buffer.isBuffer(data)
      ? data.toString('utf8')
      : Array.isArray(data)
        ? Buffer.concat(data).toString('utf8')
        : Buffer.from(data).toString('utf8');
    if (this.#keepRaw) this.raw.push(raw);
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch {
      this.invalid.push({ raw, problem: 'not JSON' });
      return;
    }
    const parsed = ServerFrame.safeParse(value);
    if (isBinary) this.invalid.push({ raw, problem: 'binary frame' });
    if (!parsed.success) this.invalid.push({ raw, problem: parsed.error.message });
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

/**
 * Opens a client on a conversation and waits for its `sync` frame; the client is
 * added to `opened`, so that the test can close whatever it opened.
 */
export async function connectSynced(
  wsUrl: string,
  opened: WsClient[],
  conversationId: string,
  afterSeq?: number,
): Promise<WsClient> {
  const client = await WsClient.connect(wsUrlFor(wsUrl, conversationId, afterSeq));
  opened.push(client);
  await client.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
  return client;
}
