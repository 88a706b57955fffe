import type { ServerFrame } from '../../protocol/index.ts';

export type SyncFrame = Extract<ServerFrame, { type: 'sync' }>;
export type EventFrame = Extract<ServerFrame, { type: 'event' }>;
export type StatusFrame = Extract<ServerFrame, { type: 'status' }>;
export type DeltaFrame = Extract<ServerFrame, { type: 'delta' }>;
export type ErrorFrame = Extract<ServerFrame, { type: 'error' }>;
export type PongFrame = Extract<ServerFrame, { type: 'pong' }>;

/**
 * Where the client is: `connecting` (a socket is opening, or open and
 * waiting for `sync`), `live` (`sync` came: events flow and queued actions
 * are sent), `waiting` (dropped; a reconnection is due), `closed` (for good).
 */
export type ClientState = 'connecting' | 'live' | 'waiting' | 'closed';

/** How a socket closed. */
export interface CloseInfo {
  code: number;
  reason: string;
  /** No reconnection follows: closed by the caller, a close code after which retrying cannot help, or reconnecting is off. */
  final: boolean;
}

/**
 * A frame that was not passed on: `binary` (the protocol's frames are text),
 * `not_json`, `shape` (the frame check refused it: `problem` says why), or
 * `order` (an event frame at or before the cursor, or before `sync`, or a
 * second `sync`: the server broke its promise of each event once, in order).
 */
export interface InvalidFrame {
  reason: 'binary' | 'not_json' | 'shape' | 'order';
  problem: string;
  /** The frame's text as received (a binary frame's bytes decoded as UTF-8). */
  raw: string;
  /** The parsed JSON, when it was JSON. */
  value?: unknown;
}

/**
 * What the client tells its caller, each optional. Frame handlers get the
 * frame's text as received as well (the client keeps no copy): for callers
 * that check bytes.
 */
export interface ProtocolHandlers {
  /** The client's state changed. */
  state?(state: ClientState): void;
  /** A socket opened (the handshake succeeded; `sync` is still to come). */
  open?(): void;
  /** `sync`, first on every socket: the conversation's last seq when the socket joined, and its agent state. */
  sync?(frame: SyncFrame, raw: string): void;
  /** Each stored event after the cursor, once and in order, across reconnections. */
  event?(frame: EventFrame, raw: string): void;
  /** A transient status (never stored, in no order relative to events). */
  status?(frame: StatusFrame, raw: string): void;
  /**
   * A piece of an agent reply as it is generated (never stored). Key them by
   * (item_id, attempt, index); drop an older attempt's text when a newer one
   * starts; replace them by the stored event whose `data.item_id` is the item.
   */
  delta?(frame: DeltaFrame, raw: string): void;
  /** The server refused a frame or an action; the connection stays open. */
  error?(frame: ErrorFrame, raw: string): void;
  pong?(frame: PongFrame, raw: string): void;
  /** A frame that failed the check or broke the order; it is not passed to the handlers above. */
  invalid?(frame: InvalidFrame): void;
  /** The socket reported an error (a refused handshake, a reset); a `close` follows. */
  socketError?(event: unknown): void;
  /** A socket closed; unless `final`, the client reconnects with its cursor. */
  close?(info: CloseInfo): void;
}
