// A nats-server cluster with JetStream on loopback, for *.cluster.test.ts files.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/store/embeddedNats.ts';
import { connectNats } from '../../src/store/natsConnection.ts';
import { natsBinary } from './natsBinary.ts';
import { freePort } from './serverProcess.ts';
import { until } from './until.ts';

const READY_TIMEOUT_MS = 20_000;
const EXIT_TIMEOUT_MS = 10_000;
const LOG_KEEP_LINES = 15;
const START_ATTEMPTS = 3;

export interface ClusterServer {
  /** `--server_name`, kept across restarts: JetStream names its peers by it. */
  readonly name: string;
  /** Client port, kept across restarts. */
  readonly port: number;
  /** Cluster (route) port, kept across restarts. */
  readonly routePort: number;
  /** `nats://127.0.0.1:<port>` */
  readonly url: string;
  /** `http://127.0.0.1:<port>` of its monitoring endpoints (`/connz`, `/jsz`...), with `monitor: true`; kept across restarts. */
  readonly monitorUrl: string | undefined;
  readonly storeDir: string;
  /** nats-server's own pid; a new one after restart(). */
  readonly pid: number;
  /** False from its exit until restart(). */
  readonly running: boolean;
}

export interface NatsCluster {
  /** One client URL per server. */
  readonly urls: string[];
  /** The client URLs comma-separated, as NATS_URL takes them. */
  readonly url: string;
  readonly servers: readonly ClusterServer[];
  /** Sends the server a signal (default SIGKILL) and waits for it to exit. */
  kill(name: string, signal?: NodeJS.Signals): Promise<void>;
  /** Sends the server a signal and does not wait (SIGUSR2: lame-duck mode, it tells its clients to leave). */
  signal(name: string, signal: NodeJS.Signals): void;
  /**
   * Starts the server again with the same name, ports and store (stopping it
   * first if it runs). Resolves when it accepts clients, not when its JetStream
   * has caught up with the others.
   */
  restart(name: string): Promise<void>;
  /** Stops every server and removes their stores. Idempotent. */
  stop(): Promise<void>;
}

export interface NatsClusterOptions {
  /** Number of servers (default 3). */
  size?: number;
  /** How long to wait for JetStream to answer cluster-wide (default 20 s). */
  readyTimeoutMs?: number;
  /** Give each server a monitoring port (`-m`), exposed as `monitorUrl` (default false). */
  monitor?: boolean;
}

/**
 * Starts `size` JetStream servers on free loopback ports, routed to each other,
 * each with its own temporary store, and resolves once a stream replicated on
 * all of them can be created. Each server runs under the guard of
 * startEmbeddedNats, so none outlives the test process, however it ends.
 */
export async function startNatsCluster(options: NatsClusterOptions = {}): Promise<NatsCluster> {
  const size = options.size ?? 3;
  let lastError: unknown;
  for (let attempt = 1; attempt <= START_ATTEMPTS; attempt++) {
    const nodes = await planNodes(size, options.monitor ?? false);
    try {
      const started = await Promise.allSettled(nodes.map((node) => node.start()));
      const failed = started.find((result) => result.status === 'rejected');
      if (failed) throw failed.reason;
      await untilJetStreamReady(nodes, options.readyTimeoutMs ?? READY_TIMEOUT_MS);
      return clusterOf(nodes);
    } catch (err) {
      lastError = err;
      await Promise.all(nodes.map((node) => node.remove()));
      // A port taken between the probe and the listen: try again on others.
      if (!(err instanceof Error && /address already in use/i.test(err.message))) break;
    }
  }
  throw lastError;
}

/** One server of the cluster: its fixed identity, and the process of the moment. */
class ClusterNode implements ClusterServer {
  readonly #log: string[] = [];
  #nats: EmbeddedNats | undefined;
  #exited: Promise<void> = Promise.resolve();
  #running = false;

  constructor(
    readonly name: string,
    readonly port: number,
    readonly routePort: number,
    readonly monitorPort: number | undefined,
    readonly dataDir: string,
    readonly extraArgs: readonly string[],
  ) {}

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  get monitorUrl(): string | undefined {
    return this.monitorPort === undefined ? undefined : `http://127.0.0.1:${this.monitorPort}`;
  }

  get storeDir(): string {
    return join(this.dataDir, 'nats');
  }

  get pid(): number {
    if (!this.#nats) throw new Error(`${this.name} was never started`);
    return this.#nats.pid;
  }

  get running(): boolean {
    return this.#running;
  }

  /** The server's last log lines, for error messages. */
  logTail(): string {
    return this.#log.join('\n');
  }

  async start(): Promise<void> {
    const log = (line: string) => {
      this.#log.push(line);
      if (this.#log.length > LOG_KEEP_LINES) this.#log.shift();
    };
    const nats = await startEmbeddedNats({
      dataDir: this.dataDir,
      binary: natsBinary(),
      port: this.port,
      extraArgs: this.extraArgs,
      log,
    });
    this.#nats = nats;
    this.#running = true;
    this.#exited = new Promise((resolve) =>
      nats.onExit(() => {
        this.#running = false;
        resolve();
      }),
    );
  }

  async kill(signal: NodeJS.Signals): Promise<void> {
    if (!this.#running) throw new Error(`${this.name} is not running`);
    process.kill(this.pid, signal);
    const exited = await Promise.race([this.#exited.then(() => true), sleep(EXIT_TIMEOUT_MS, false)]);
    if (!exited) throw new Error(`${this.name} did not exit within ${EXIT_TIMEOUT_MS} ms of ${signal}`);
  }

  async stop(): Promise<void> {
    await this.#nats?.stop();
  }

  async remove(): Promise<void> {
    await this.stop();
    await rm(this.dataDir, { recursive: true, force: true });
  }
}

/** Names, distinct free ports and a store for each server; nothing started yet. */
async function planNodes(size: number, monitor: boolean): Promise<ClusterNode[]> {
  const ports = new Set<number>();
  while (ports.size < (monitor ? 3 : 2) * size) ports.add(await freePort());
  const all = [...ports];
  const [clientPorts, routePorts, monitorPorts] = [all.slice(0, size), all.slice(size, 2 * size), all.slice(2 * size)];
  const routes = routePorts.map((port) => `nats://127.0.0.1:${port}`);
  const clusterName = `tether-test-${randomBytes(4).toString('hex')}`;
  return Promise.all(
    clientPorts.map(async (port, i) => {
      const name = `n${i + 1}`;
      const routePort = routePorts[i]!;
      const monitorPort = monitorPorts[i];
      const dataDir = await mkdtemp(join(tmpdir(), `tether-cluster-${name}-`));
      const args = ['--server_name', name, '--cluster_name', clusterName, '--cluster', routes[i]!];
      if (monitorPort !== undefined) args.push('-m', String(monitorPort));
      return new ClusterNode(name, port, routePort, monitorPort, dataDir, [...args, '--routes', routes.join(',')]);
    }),
  );
}

/**
 * The names of the clients connected to a running server right now, as its
 * `/connz` lists them (the cluster must have been started with `monitor: true`).
 */
export async function connectionNames(server: ClusterServer): Promise<string[]> {
  if (server.monitorUrl === undefined)
    throw new Error(`${server.name} has no monitoring port: start with monitor: true`);
  const res = await fetch(`${server.monitorUrl}/connz?limit=1024`, { signal: AbortSignal.timeout(2_000) });
  if (res.status !== 200) throw new Error(`${server.name} /connz answered ${res.status}: ${await res.text()}`);
  const body = (await res.json()) as { connections?: Array<{ name?: string }> };
  return (body.connections ?? []).map((connection) => connection.name ?? '');
}

/**
 * Waits until every stream (an event stream, the buckets') has a leader and all
 * its other replicas online and current, on the running servers: a cluster at
 * rest, where losing any one server leaves a quorum that can elect at once.
 */
export async function untilReplicasCurrent(cluster: NatsCluster, timeoutMs = 20_000): Promise<void> {
  const nc = await connectNats(cluster.url, { name: 'tether-cluster-current' });
  try {
    const jsm = await jetstreamManager(nc, { timeout: 2_000, checkAPI: false });
    await until(
      async () => {
        for await (const si of jsm.streams.list()) {
          const replicas = si.cluster?.replicas ?? [];
          if (!si.cluster?.leader || replicas.some((r) => !r.current || r.offline)) return undefined;
          if (replicas.length !== Math.min(si.config.num_replicas, cluster.servers.length) - 1) return undefined;
        }
        return true;
      },
      'every stream led, with every replica online and current',
      { timeoutMs, everyMs: 100, retryErrors: true },
    );
  } finally {
    await nc.close();
  }
}

/**
 * Steps down the leader of every stream (an event stream, the buckets') that
 * `server` leads, until it leads none: what an operator does before stopping a
 * nats-server 2.9, which does not hand its leaderships over as it stops.
 * Returns the streams it led.
 */
export async function moveLeadersOff(
  cluster: NatsCluster,
  server: ClusterServer,
  timeoutMs = 15_000,
): Promise<string[]> {
  const nc = await connectNats(cluster.url, { name: 'tether-cluster-step-down' });
  const moved = new Set<string>();
  try {
    const jsm = await jetstreamManager(nc, { timeout: 2_000, checkAPI: false });
    await until(
      async () => {
        let leads = 0;
        for await (const si of jsm.streams.list()) {
          if (si.cluster?.leader !== server.name) continue;
          leads += 1;
          moved.add(si.config.name);
          await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${si.config.name}`, '', { timeout: 2_000 });
        }
        return leads === 0;
      },
      `${server.name} to lead no stream`,
      { timeoutMs, everyMs: 100, retryErrors: true },
    );
    return [...moved].sort();
  } finally {
    await nc.close();
  }
}

/** Polls until a stream replicated on every server (up to 5) can be created, then deletes it. */
async function untilJetStreamReady(nodes: ClusterNode[], timeoutMs: number): Promise<void> {
  const nc = await connectNats(nodes.map((node) => node.url).join(','), { name: 'tether-cluster-ready' });
  const probe = `CLUSTER_READY_${randomBytes(4).toString('hex').toUpperCase()}`;
  try {
    await until(
      async () => {
        const jsm = await jetstreamManager(nc, { timeout: 2_000, checkAPI: false });
        await jsm.getAccountInfo();
        await jsm.streams.add({
          name: probe,
          subjects: [`cluster-ready.${probe}`],
          storage: StorageType.Memory,
          num_replicas: Math.min(nodes.length, 5),
        });
        await jsm.streams.delete(probe);
        return true;
      },
      'JetStream to be ready cluster-wide',
      { timeoutMs, everyMs: 100, retryErrors: true },
    ).catch((err: unknown) => {
      const logs = nodes.map((node) => `--- ${node.name} (${node.url}) ---\n${node.logTail()}`).join('\n');
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${logs}`);
    });
  } finally {
    await nc.close();
  }
}

function clusterOf(nodes: ClusterNode[]): NatsCluster {
  const byName = (name: string): ClusterNode => {
    const node = nodes.find((candidate) => candidate.name === name);
    if (!node) throw new Error(`no server named ${name} (${nodes.map((n) => n.name).join(', ')})`);
    return node;
  };
  const urls = nodes.map((node) => node.url);
  let stopping: Promise<void> | undefined;
  return {
    urls,
    url: urls.join(','),
    servers: nodes,
    kill: (name, signal = 'SIGKILL') => byName(name).kill(signal),
    signal: (name, signal) => process.kill(byName(name).pid, signal),
    restart: async (name) => {
      const node = byName(name);
      await node.stop();
      await node.start();
    },
    stop: () => (stopping ??= Promise.all(nodes.map((node) => node.remove())).then(() => undefined)),
  };
}
