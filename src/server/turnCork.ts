import type { Socket } from 'node:net';
import type { WebSocket } from 'ws';

/** The sockets held in this turn of the event loop. */
const corked = new Set<Socket>();
let uncorking: NodeJS.Immediate | undefined;

function uncorkAll(): void {
  uncorking = undefined;
  for (const socket of corked) socket.uncork();
  corked.clear();
}

/**
 * Holds what is sent on `ws` until this turn of the event loop ends, so that
 * the frames one socket gets in a turn (a client catching up: up to a page of
 * 1,000 events at once) leave in one write instead of one each. Frames and
 * their order are unchanged; the write goes out in the same turn's check phase
 * (setImmediate), before any timer.
 *
 * ws keeps its net.Socket private (`_socket`); without one (not open yet,
 * closed) nothing is held.
 */
export function holdForTurn(ws: WebSocket): void {
  const socket = (ws as unknown as { _socket?: Socket | null })._socket;
  if (!socket || socket.destroyed || corked.has(socket)) return;
  socket.cork();
  corked.add(socket);
  uncorking ??= setImmediate(uncorkAll);
}
