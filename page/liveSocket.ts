import type { LoggedEvent, UserAction } from '../protocol/index.ts';
import { currentToken } from './api.ts';

export interface SocketHandlers {
  /** Each stored event once, in order (a reconnect resumes after the last one). */
  event(logged: LoggedEvent): void;
  status(message: string, level: string): void;
  error(code: string, message: string): void;
  /** The connection is up (`true`, after `sync`) or down (`false`, reconnecting). */
  connected(up: boolean): void;
}

/** Close codes after which reconnecting cannot help. */
const FINAL = new Set([4000, 4001, 4004]);

/**
 * One conversation over the documented WebSocket protocol: `sync`, then every
 * event after the cursor; after a drop it reconnects with its cursor (the last
 * seq it got) and so gets exactly what it missed.
 */
export class LiveSocket {
  readonly #id: string;
  readonly #handlers: SocketHandlers;
  #socket: WebSocket | null = null;
  #cursor = 0;
  #closed = false;
  #retryMs = 250;
  /** Whether `sync` came on the current socket. */
  #synced = false;
  /** Actions asked for while the socket was down: sent, in order, once it is up again. */
  readonly #queued: string[] = [];

  constructor(conversationId: string, handlers: SocketHandlers) {
    this.#id = conversationId;
    this.#handlers = handlers;
    this.#open();
  }

  /** The seq of the last event received. */
  get cursor(): number {
    return this.#cursor;
  }

  /** Sends an action now, or once the socket is up again (each with its client_id: stored once). */
  send(action: UserAction): void {
    this.#queued.push(JSON.stringify({ type: 'user_action', action, client_id: crypto.randomUUID() }));
    this.#flush();
  }

  #flush(): void {
    const socket = this.#socket;
    if (!socket || !this.#synced || socket.readyState !== WebSocket.OPEN) return;
    for (const frame of this.#queued.splice(0)) socket.send(frame);
  }

  /** Drops the connection as a network fault would (the page then catches up). */
  drop(): void {
    this.#socket?.close(4100, 'dropped by the page');
  }

  close(): void {
    this.#closed = true;
    this.#socket?.close(1000);
  }

  #open(): void {
    const query = new URLSearchParams({ conversation_id: this.#id, after_seq: String(this.#cursor) });
    const token = currentToken();
    if (token) query.set('token', token);
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const socket = new WebSocket(`${scheme}://${location.host}/ws?${query}`);
    this.#socket = socket;
    this.#synced = false;
    socket.onmessage = (message) => this.#frame(JSON.parse(String(message.data)) as Frame);
    socket.onclose = (close) => {
      if (this.#socket !== socket) return;
      this.#handlers.connected(false);
      if (this.#closed) return;
      if (FINAL.has(close.code)) {
        this.#handlers.error(`CLOSED_${close.code}`, close.reason || 'the server closed the connection');
        return;
      }
      setTimeout(() => this.#open(), this.#retryMs);
      this.#retryMs = Math.min(this.#retryMs * 2, 5_000);
    };
  }

  #frame(frame: Frame): void {
    switch (frame.type) {
      case 'sync':
        this.#retryMs = 250;
        this.#synced = true;
        this.#handlers.connected(true);
        this.#flush();
        return;
      case 'event':
        if (frame.seq <= this.#cursor) return;
        this.#cursor = frame.seq;
        this.#handlers.event({ seq: frame.seq, event: frame.event });
        return;
      case 'status':
        this.#handlers.status(frame.message, frame.level);
        return;
      case 'error':
        this.#handlers.error(frame.code, frame.message);
        return;
    }
  }
}

type Frame =
  | { type: 'sync' }
  | ({ type: 'event' } & LoggedEvent)
  | { type: 'status'; level: string; message: string }
  | { type: 'error'; code: string; message: string }
  | { type: 'pong' };
