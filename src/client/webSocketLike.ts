/**
 * What the client needs of a WebSocket: the WHATWG API that browsers have and
 * that `ws`'s `WebSocket` implements too. The client imports no socket
 * library; its caller gives the class (the browser's, or `ws`'s in Node 20,
 * which has no global WebSocket).
 */
export interface WebSocketLike {
  /** 0 connecting, 1 open, 2 closing, 3 closed. */
  readonly readyState: number;
  /** The client sets `arraybuffer`, so that a binary frame arrives synchronously (a Blob would not). */
  binaryType: string;
  onopen: Listener<unknown> | null;
  onmessage: Listener<{ readonly data: unknown }> | null;
  onerror: Listener<unknown> | null;
  onclose: Listener<{ readonly code: number; readonly reason: string }> | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** How the client makes a socket: `new WebSocket(url)`. */
export type WebSocketConstructor<S extends WebSocketLike = WebSocketLike> = new (url: string) => S;

/**
 * An event listener, checked bivariantly (as methods are): the browser's
 * listeners take a DOM `MessageEvent`, `ws`'s its own, and both have what
 * this one reads.
 */
type Listener<E> = { bivariant(event: E): void }['bivariant'];

/** `readyState` of an open socket. */
export const OPEN = 1;
