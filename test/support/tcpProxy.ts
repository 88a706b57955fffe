// A loopback TCP proxy in front of a server (nats-server), to lose bytes on purpose:
// what a client sends, or what it would get back, until its connection is cut.
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface TcpProxy {
  /** `nats://127.0.0.1:<port>` of the proxy. */
  readonly url: string;
  /** Drops what the client sends (toServer) or what the server answers (toClient), on the connections open now and later. */
  drop(direction: 'toServer' | 'toClient'): void;
  /** Destroys every open connection (the client sees its socket close) and forwards everything again. */
  cut(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  const dropping = { toServer: false, toClient: false };
  const open = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port: targetPort });
    open.add(client).add(upstream);
    client.on('data', (chunk) => dropping.toServer || upstream.write(chunk));
    upstream.on('data', (chunk) => dropping.toClient || client.write(chunk));
    const end = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const cut = () => {
    for (const socket of open) socket.destroy();
    open.clear();
    dropping.toServer = false;
    dropping.toClient = false;
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    drop: (direction) => {
      dropping[direction] = true;
    },
    cut,
    close: async () => {
      cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
