import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../logger.ts';
import type { SessionManager } from '../session/index.ts';
import type { Authenticate } from './auth.ts';
import { httpApi } from './httpApi.ts';
import { WsGateway } from './wsGateway.ts';

export interface TetherServerOptions {
  manager: SessionManager;
  logger: Logger;
  maxFrameBytes: number;
  maxBodyBytes: number;
  maxPendingBytes?: number;
  ws?: {
    framesPerSecond?: number;
    frameBurst?: number;
    maxConnectionsPerConversation?: number;
    pingIntervalMs?: number;
  };
  /** Whether the server can serve (its event store is reachable), for `/readyz`. */
  ready?: () => boolean | Promise<boolean>;
  /** Who is calling; null when unauthenticated. Default: everyone is user `local`. */
  authenticate?: Authenticate;
}

export interface TetherServer {
  readonly http: Server;
  readonly ws: WsGateway;
  listen(port: number, host: string): Promise<AddressInfo>;
  /** Stops accepting, closes sockets with 1001, then closes the listener. */
  close(): Promise<void>;
}

export const localUser: Authenticate = async () => 'local';

/** HTTP and WebSocket on one port. No business rules here: parse, authenticate, route. */
export function tetherServer(options: TetherServerOptions): TetherServer {
  const authenticate = options.authenticate ?? localUser;
  const http = createServer(httpApi({ ...options, authenticate }));
  const ws = new WsGateway({ ...options, ...options.ws, authenticate });
  http.on('upgrade', (req, socket, head) => ws.handleUpgrade(req, socket, head));
  return {
    http,
    ws,
    listen: (port, host) =>
      new Promise((resolve, reject) => {
        http.once('error', reject);
        http.listen(port, host, () => {
          http.off('error', reject);
          resolve(http.address() as AddressInfo);
        });
      }),
    close: async () => {
      const closed = new Promise<void>((resolve) => http.close(() => resolve()));
      await ws.close();
      http.closeAllConnections();
      await closed;
    },
  };
}
