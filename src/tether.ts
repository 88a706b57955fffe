import type { AddressInfo } from 'node:net';
import type { Agent } from './agent/index.ts';
import { silentLogger, type Logger } from './logger.ts';
import { TetherMetrics } from './metrics.ts';
import type { RuntimeProvider } from './runtime/index.ts';
import type { McpHub } from './mcp/index.ts';
import { tetherServer, type TetherServer, type TetherServerOptions } from './server/index.ts';
import { ClusterOwnership } from './cluster/index.ts';
import { NodeHost, type SessionLimits } from './host/index.ts';
import type { ClusterBus, ClusterStore, SecretStore, Stores } from './store/index.ts';

/** Largest WebSocket frame accepted by default (TETHER_MAX_FRAME_BYTES). */
export const DEFAULT_MAX_FRAME_BYTES = 1_048_576;
/** Largest REST body accepted by default (TETHER_MAX_BODY_BYTES). */
export const DEFAULT_MAX_BODY_BYTES = 10_485_760;

/** Everything a Tether is built from. Nothing here is read from the environment. */
export interface TetherOptions {
  stores: Stores;
  runtimes: RuntimeProvider;
  /** The agent of every conversation, or a function choosing one per conversation. */
  agent: Agent | ((conversationId: string) => Agent);
  logger?: Logger;
  limits?: Partial<SessionLimits>;
  /** Time and ids, injected so that tests and benches can fix them. */
  clock?: () => Date;
  newId?: () => string;
  commandTimeoutMs?: number;
  /** The node's MCP servers (none: conversations have no MCP tools). */
  mcp?: McpHub;
  /** TETHER_CONFIRM_UNKNOWN: a call the model did not rate waits in confirmation mode (default true). */
  confirmUnknown?: boolean;
  /** Run as one node of a cluster: ownership by heartbeat and owner records, actions forwarded to owners. */
  cluster?: ClusterOptions;
  /** Secrets sealed where any node can read them, or 'refuse' them (default: this process's memory only). */
  secrets?: SecretStore | 'refuse';
  /** HTTP and WebSocket settings; each has the documented default. */
  server?: Partial<Omit<TetherServerOptions, 'commands' | 'queries' | 'feed' | 'logger' | 'metrics'>>;
  /** Add the process's own metrics (CPU, memory, event loop lag) to `/metrics` (default false). */
  processMetrics?: boolean;
}

export interface ClusterOptions {
  nodeId: string;
  /** A node's heartbeat ages out this long after its last renewal (TETHER_LEASE_MS). */
  leaseMs: number;
  store: ClusterStore;
  bus: ClusterBus;
  /** Where clients reach this node (TETHER_PUBLIC_URL), shown to the others and in `GET /api/cluster`. */
  url?: string;
}

/** A built Tether: its node's host and its HTTP + WebSocket server, not yet listening. */
export interface Tether {
  readonly host: NodeHost;
  readonly server: TetherServer;
  /** What `GET /metrics` shows; `natsReconnected()` is the connection owner's to call. */
  readonly metrics: TetherMetrics;
  /** Listens (0: any free port); a server handed in already listening keeps its port. */
  listen(port: number, host: string): Promise<AddressInfo>;
  /** Joins the cluster, when there is one (a first heartbeat, then forwarded actions are answered). */
  start(): Promise<void>;
  /** Stops in order: server (clients closed with 1001), then sessions (passivated, runtimes stopped). */
  close(): Promise<void>;
}

/**
 * The one composition factory: builds the node's host and the server from
 * explicit dependencies. `tether serve` calls it after reading the
 * configuration and connecting; tests and benches call it with their own.
 */
export function createTether(options: TetherOptions): Tether {
  const logger = options.logger ?? silentLogger;
  const { agent } = options;
  const metrics = new TetherMetrics({ processMetrics: options.processMetrics });
  const host = new NodeHost({
    ...options.stores,
    log: metrics.measure(options.stores.log),
    runtimes: options.runtimes,
    agentFor: typeof agent === 'function' ? agent : () => agent,
    logger,
    limits: options.limits,
    clock: options.clock,
    newId: options.newId,
    commandTimeoutMs: options.commandTimeoutMs,
    mcp: options.mcp,
    confirmUnknown: options.confirmUnknown,
    secrets: options.secrets,
    ...(options.cluster && {
      ownership: new ClusterOwnership({ ...options.cluster, url: options.cluster.url ?? null, logger }),
      bus: options.cluster.bus,
    }),
  });
  const server = tetherServer({
    maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
    maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
    ...options.server,
    commands: host.commands,
    queries: host.queries,
    feed: host.feed,
    logger,
    metrics,
  });
  metrics.observe({
    liveSessions: () => host.liveCount,
    connections: () => server.ws.clientCount,
    ownedConversations: () => host.clusterCounts.owned,
    takeovers: () => host.clusterCounts.takeovers,
    forwardedActions: () => host.clusterCounts.forwarded,
  });
  return {
    host,
    server,
    metrics,
    listen: (port, host) => server.listen(port, host),
    start: () => host.start(),
    close: async () => {
      if (options.cluster) {
        // A drain: sessions leave and give up their ownership first, then clients are told to go elsewhere.
        await host.shutdown();
        await server.close();
        return;
      }
      await server.close();
      await host.shutdown();
    },
  };
}
