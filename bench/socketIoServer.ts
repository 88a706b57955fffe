// The Socket.IO baseline's server: what a user would otherwise write for live
// fan-out with replay after a drop. Connection state recovery on (every
// broadcast is kept in memory with an offset, so a client that reconnects
// within two minutes gets what it missed), one room per conversation, every
// message broadcast to the whole room, sender included. Nothing is stored.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';
import { SOCKET_IO_EVENT } from './socketIoEvent.ts';

export interface SocketIoBaseline {
  /** `http://127.0.0.1:PORT` for socket.io-client. */
  url: string;
  close(): Promise<void>;
}

export async function startSocketIoServer(): Promise<SocketIoBaseline> {
  const http = createServer();
  const io = new Server(http, {
    connectionStateRecovery: { maxDisconnectionDuration: 2 * 60_000, skipMiddlewares: true },
    // Like the Tether side: a WebSocket from the start, no long-polling, no compression.
    transports: ['websocket'],
    perMessageDeflate: false,
    serveClient: false,
    maxHttpBufferSize: 1 << 20,
  });
  io.on('connection', (socket) => {
    const room: unknown = (socket.handshake.auth as { room?: unknown }).room;
    if (typeof room !== 'string' || room === '') {
      socket.disconnect(true);
      return;
    }
    void socket.join(room);
    // io.to(room), not socket.to(room): the sender gets its message back, as Tether delivers it back.
    socket.on(SOCKET_IO_EVENT, (payload: unknown) => {
      io.to(room).emit(SOCKET_IO_EVENT, payload);
    });
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => {
      http.off('error', reject);
      resolve();
    });
  });
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      io.disconnectSockets(true);
      await io.close();
    },
  };
}
