import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../logger.ts';
import type { ConversationCommands } from '../host/index.ts';
import type { ConversationFeed, ConversationQueries } from '../queries/index.ts';
import type { Authenticate } from './auth.ts';
import { httpApi } from './httpApi.ts';
import type { PageAsset } from './pageAssets.ts';
import { WsGateway } from './wsGateway.ts';

/** What the server sees of the node's host: commands, queries and the live feed; no business rules here. */
export interface HostPorts {
  commands: ConversationCommands;
  queries: ConversationQueries;
  feed: ConversationFeed;
}

export interface TetherServerOptions extends HostPorts {
  logger: Logger;
  maxFrameBytes: number;
  maxBodyBytes: number;
  maxPendingBytes?: number;
  ws?: {
    framesPerSecond?: number;
    frameBurst?: number;
    maxConnectionsPerConversation?: number;
    pingIntervalMs?: number;
    closeTimeoutMs?: number;
  };
  /** Whether the server can serve (its event store is reachable), for `/readyz`. */
  ready?: () => boolean | Promise<boolean>;
  /** What `GET /metrics` shows; without it the route answers 404. */
  metrics?: { contentType: string; text(): Promise<string> };
  /** Who is calling; null when unauthenticated. Default: everyone is user `local`. */
  authenticate?: Authenticate;
  /** The page's built files (`pageAssets()`); without it `/` answers 404. */
  page?: (name: string) => PageAsset | undefined;
  /** Serve on this HTTP server (one from `startingServer()`, maybe listening already) instead of a new one. */
  http?: Server;
  /** `file:` repository URLs are cloned (see `HttpApiOptions`); default: only without `authenticate` (one user). */
  fileRepositories?: boolean;
  /**
   * Names a request's or handshake's `Host` must have, besides loopback ones
   * (`allowedHosts()` builds them), for a server without tokens: another site's
   * name that resolves here (DNS rebinding) is refused with 403 `FOREIGN_HOST`.
   * `/healthz`, `/readyz` and `/metrics` answer any Host. Absent: any Host.
   */
  allowedHosts?: readonly string[];
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
  const http = options.http ?? createServer();
  // A starting server's 503 answers give way to the real ones.
  http.removeAllListeners('request').removeAllListeners('upgrade');
  const fileRepositories = options.fileRepositories ?? options.authenticate === undefined;
  http.on('request', httpApi({ ...options, authenticate, fileRepositories }));
  const ws = new WsGateway({ ...options, ...options.ws, authenticate });
  http.on('upgrade', (req, socket, head) => ws.handleUpgrade(req, socket, head));
  return {
    http,
    ws,
    listen: (port, host) =>
      new Promise((resolve, reject) => {
        if (http.listening) return resolve(http.address() as AddressInfo);
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

const STARTING_BODY = JSON.stringify({ error: { code: 'STARTING', message: 'Tether is starting; try again shortly' } });

/**
 * An HTTP server that answers every request (`/healthz` too) with 503
 * `STARTING`, and refuses WebSocket upgrades, until `tetherServer({ http })`
 * takes it over. The CLI listens on it before it starts anything else, so the
 * port is Tether's from the first moment (an embedded nats-server cannot take it).
 */
export function startingServer(): Server {
  const http = createServer((_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' }).end(STARTING_BODY);
  });
  http.on('upgrade', (_req: IncomingMessage, socket: Duplex) => {
    socket.end('HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
  });
  return http;
}
