import type { ServerFrame, UserAction } from '../../protocol/index.ts';
import { backoffDelay, type Backoff } from './backoff.ts';
import type { ClientState, InvalidFrame, ProtocolHandlers } from './clientHandlers.ts';
import { afterSeqOf, connectUrl } from './connectUrl.ts';
import { ConnectionClosedError } from './errors.ts';
import { lightFrameCheck, type FrameCheck } from './frameCheck.ts';
import { OPEN, type WebSocketConstructor, type WebSocketLike } from './webSocketLike.ts';

/** Close codes after which reconnecting cannot help: bad query, unauthenticated, unknown conversation. */
export const FINAL_CLOSE_CODES: ReadonlySet<number> = new Set([4000, 4001, 4004]);

export interface ProtocolClientOptions<S extends WebSocketLike = WebSocketLike> {
  /** The WebSocket class: the browser's, or `ws`'s `WebSocket` in Node (perhaps a subclass that sets its options). */
  WebSocket: WebSocketConstructor<S>;
  /**
   * The server's WebSocket address, `ws://host:port/ws`. Its query is kept
   * (a caller's own parameters); the client sets `conversation_id`, `token`
   * and `after_seq` on it when it has them. Given whole and alone, it is used
   * as it is on the first connection.
   */
  url: string;
  conversationId?: string;
  /** Sent as `?token=` (browsers cannot set a header on a WebSocket). */
  token?: string;
  /**
   * The cursor to start from: events with a greater seq come. Default: the
   * url's `after_seq`, else 0 (the whole history).
   */
  afterSeq?: number;
  /** Reconnect after a drop, with the cursor (default: yes, with the default backoff). */
  reconnect?: boolean | Backoff;
  /** Checks every frame (default: lightFrameCheck; pass `(value) => ServerFrame.safeParse(value)` for the schema). */
  check?: FrameCheck;
  handlers?: ProtocolHandlers;
}

const PING = JSON.stringify({ type: 'ping' });

/**
 * One conversation over Tether's WebSocket protocol, in a browser or in Node.
 * It connects after its cursor, takes `sync` first and then every event
 * after the cursor once and in order; after a drop it reconnects with the
 * cursor (the last seq it passed on), so it gets exactly what it missed. It
 * does not reconnect after close codes 4000, 4001 and 4004 (nothing would
 * change), nor after `close()`. User actions are queued while it is not live
 * and sent once `sync` has come, each with its `client_id`.
 *
 * Every frame is parsed once and checked (see `check`); one that fails, or
 * that breaks the order, goes to `handlers.invalid` and nowhere else.
 */
export class ProtocolClient<S extends WebSocketLike = WebSocketLike> {
  readonly #options: ProtocolClientOptions<S>;
  readonly #handlers: ProtocolHandlers;
  readonly #check: FrameCheck;
  readonly #backoff: Backoff | null;
  #socket: S | null = null;
  #state: ClientState = 'connecting';
  #cursor: number;
  /** Whether the first socket may use the url as it was given. */
  #urlAsGiven: boolean;
  /** Whether `sync` came on the current socket. */
  #synced = false;
  #attempts = 0;
  #retry: ReturnType<typeof setTimeout> | undefined;
  /** `user_action` frames not sent yet, in order. */
  readonly #queue: string[] = [];
  /** Pings sent on the current socket and not yet answered, oldest first. */
  #pings: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];

  constructor(options: ProtocolClientOptions<S>) {
    this.#options = options;
    this.#handlers = options.handlers ?? {};
    this.#check = options.check ?? lightFrameCheck;
    const { reconnect = true } = options;
    this.#backoff = reconnect === false ? null : reconnect === true ? {} : reconnect;
    const given = afterSeqOf(options.url);
    this.#cursor = options.afterSeq ?? given ?? 0;
    this.#urlAsGiven =
      options.conversationId === undefined &&
      options.token === undefined &&
      (options.afterSeq === undefined || options.afterSeq === given);
    this.#open();
  }

  /** The seq of the last event passed on (or the starting cursor). */
  get cursor(): number {
    return this.#cursor;
  }

  get state(): ClientState {
    return this.#state;
  }

  /** The current socket, or null while none is open or opening: a raw escape hatch (tests send bad bytes on it). */
  get socket(): S | null {
    return this.#socket;
  }

  /**
   * Sends a user action now when live, else once `sync` has come on the next
   * socket (in the order asked). The `client_id` (generated when not given)
   * makes the server store it once however often it arrives; `null` sends
   * none (a retry is then stored again: for callers that measure the server
   * without it). An action sent on a socket that then dropped is not sent
   * again: whether it was stored shows in the events. Returns the `client_id`.
   */
  send(action: UserAction, clientId: string | null = crypto.randomUUID()): string | null {
    const frame = JSON.stringify(
      clientId === null ? { type: 'user_action', action } : { type: 'user_action', action, client_id: clientId },
    );
    const socket = this.#socket;
    if (this.#queue.length === 0 && this.#synced && socket?.readyState === OPEN) socket.send(frame);
    else {
      this.#queue.push(frame);
      this.#flush();
    }
    return clientId;
  }

  /** A round trip: resolves on the pong, after every frame the server sent before it. Needs an open socket. */
  ping(): Promise<void> {
    return new Promise((resolve, reject) => {
      const socket = this.#socket;
      if (socket?.readyState !== OPEN) return reject(new ConnectionClosedError('ping'));
      this.#pings.push({ resolve, reject });
      socket.send(PING);
    });
  }

  /**
   * Sends text as it is on the open socket, whatever it holds (for tests of
   * bad input). Returns false, having sent nothing, when no socket is open.
   */
  sendRaw(text: string): boolean {
    const socket = this.#socket;
    if (socket?.readyState !== OPEN) return false;
    socket.send(text);
    return true;
  }

  /** Drops the current socket as a network fault would; the client reconnects with its cursor. */
  drop(code = 4100, reason = 'dropped by the client'): void {
    this.#socket?.close(code, reason);
  }

  /** Closes for good: no reconnection; queued actions stay unsent. */
  close(code = 1000, reason?: string): void {
    if (this.#state === 'closed') return;
    clearTimeout(this.#retry);
    const socket = this.#socket;
    this.#setState('closed');
    this.#rejectPings('closed by the client');
    socket?.close(code, reason);
  }

  #open(): void {
    const socket = new this.#options.WebSocket(this.#url());
    this.#socket = socket;
    this.#synced = false;
    socket.binaryType = 'arraybuffer';
    this.#setState('connecting');
    socket.onopen = () => {
      if (this.#socket === socket) this.#handlers.open?.();
    };
    socket.onmessage = (message) => {
      if (this.#socket === socket) this.#message(message.data);
    };
    socket.onerror = (event) => {
      if (this.#socket === socket) this.#handlers.socketError?.(event);
    };
    socket.onclose = (close) => this.#closed(socket, close.code, close.reason);
  }

  #url(): string {
    if (!this.#urlAsGiven) return connectUrl(this.#options, this.#cursor);
    this.#urlAsGiven = false;
    return this.#options.url;
  }

  #closed(socket: S, code: number, reason: string): void {
    if (this.#socket !== socket) return;
    this.#socket = null;
    this.#synced = false;
    this.#rejectPings(`closed (${code}) before the pong`);
    const final = this.#state === 'closed' || this.#backoff === null || FINAL_CLOSE_CODES.has(code);
    this.#setState(final ? 'closed' : 'waiting');
    this.#handlers.close?.({ code, reason, final });
    // The close handler may have closed the client.
    if (this.#state !== 'waiting') return;
    this.#retry = setTimeout(
      () => {
        if (this.#state === 'waiting') this.#open();
      },
      backoffDelay(this.#attempts++, this.#backoff ?? {}),
    );
  }

  #message(data: unknown): void {
    if (typeof data !== 'string') return this.#binary(data);
    let value: unknown;
    try {
      value = JSON.parse(data);
    } catch {
      return this.#invalid({ reason: 'not_json', problem: 'not JSON', raw: data });
    }
    const checked = this.#check(value);
    if (!checked.success) return this.#invalid({ reason: 'shape', problem: checked.error.message, raw: data, value });
    const frame = value as ServerFrame;
    switch (frame.type) {
      case 'event':
        if (!this.#synced) return this.#invalid({ reason: 'order', problem: 'an event before sync', raw: data, value });
        if (frame.seq <= this.#cursor) {
          const problem = `event seq ${frame.seq} is not after the cursor ${this.#cursor}`;
          return this.#invalid({ reason: 'order', problem, raw: data, value });
        }
        this.#cursor = frame.seq;
        this.#handlers.event?.(frame, data);
        return;
      case 'sync':
        if (this.#synced) return this.#invalid({ reason: 'order', problem: 'a second sync', raw: data, value });
        this.#synced = true;
        this.#attempts = 0;
        this.#setState('live');
        this.#handlers.sync?.(frame, data);
        this.#flush();
        return;
      case 'status':
        this.#handlers.status?.(frame, data);
        return;
      case 'delta':
        if (!this.#synced) return this.#invalid({ reason: 'order', problem: 'a delta before sync', raw: data, value });
        this.#handlers.delta?.(frame, data);
        return;
      case 'error':
        this.#handlers.error?.(frame, data);
        return;
      case 'pong':
        this.#pings.shift()?.resolve();
        this.#handlers.pong?.(frame, data);
        return;
    }
  }

  #binary(data: unknown): void {
    const bytes = data instanceof ArrayBuffer ? data : ArrayBuffer.isView(data) ? data : new ArrayBuffer(0);
    const raw = new TextDecoder().decode(bytes);
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch {
      // Reported without a value.
    }
    this.#invalid({ reason: 'binary', problem: 'a binary frame', raw, ...(value !== undefined && { value }) });
  }

  #invalid(frame: InvalidFrame): void {
    this.#handlers.invalid?.(frame);
  }

  #flush(): void {
    const socket = this.#socket;
    if (!socket || !this.#synced || socket.readyState !== OPEN) return;
    for (const frame of this.#queue) socket.send(frame);
    this.#queue.length = 0;
  }

  #rejectPings(why: string): void {
    for (const ping of this.#pings.splice(0)) ping.reject(new ConnectionClosedError(why));
  }

  #setState(state: ClientState): void {
    if (this.#state === state) return;
    this.#state = state;
    this.#handlers.state?.(state);
  }
}

/** Opens a protocol client (see ProtocolClient). */
export function protocolClient<S extends WebSocketLike>(options: ProtocolClientOptions<S>): ProtocolClient<S> {
  return new ProtocolClient(options);
}
