import type { LoggedEvent } from '../protocol/index.ts';
import { FINAL_CLOSE_CODES, protocolClient, type DeltaFrame, type ProtocolClient } from '../src/client/index.ts';
import { currentToken } from './api.ts';

export interface SocketHandlers {
  /** Each stored event once, in order (a reconnect resumes after the last one). */
  event(logged: LoggedEvent): void;
  /** A piece of the agent's reply as it is written (never stored; live only). */
  delta(frame: DeltaFrame): void;
  status(message: string, level: string): void;
  /** An error frame; `clientId` names the refused action when it had one. */
  error(code: string, message: string, clientId?: string): void;
  /** The connection is up (`true`, after `sync`) or down (`false`, reconnecting). */
  connected(up: boolean): void;
}

/**
 * One conversation live over this page's own server, with the protocol
 * client: after a drop it reconnects with its cursor and gets exactly what it
 * missed; actions asked for while it is down are sent once it is up again.
 */
export function liveSocket(conversationId: string, handlers: SocketHandlers): ProtocolClient {
  const token = currentToken();
  return protocolClient({
    WebSocket,
    url: `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`,
    conversationId,
    ...(token && { token }),
    handlers: {
      event: (frame) => handlers.event(frame),
      delta: (frame) => handlers.delta(frame),
      status: (frame) => handlers.status(frame.message, frame.level),
      error: (frame) => handlers.error(frame.code, frame.message, frame.client_id),
      invalid: (frame) => handlers.error('INVALID_FRAME', `${frame.problem}: ${frame.raw.slice(0, 200)}`),
      state: (state) => handlers.connected(state === 'live'),
      close: ({ code, reason, final }) => {
        if (final && FINAL_CLOSE_CODES.has(code))
          handlers.error(`CLOSED_${code}`, reason || 'the server closed the connection');
      },
    },
  });
}
