import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { llmAgent, scriptedAgent } from '../agent/index.ts';
import { loadConfig, type Config } from '../config.ts';
import { errorFields, jsonLogger, type Logger } from '../logger.ts';
import { localRuntimeProvider, probeBwrap, type SandboxOptions } from '../runtime/index.ts';
import { allowedHosts, authenticator, pageAssets, startingServer } from '../server/index.ts';
import {
  connectNats,
  jetStreamStores,
  kvClusterStore,
  kvSecretStore,
  natsAnswers,
  natsClusterBus,
  passesWithTime,
  StoreSettingsError,
  watchConnection,
  withoutPassword,
  type NatsConnection,
} from '../store/index.ts';
import { createTether, type Tether } from '../tether.ts';
import { serveNats, type ServeNats } from './serveNats.ts';
import { McpHub } from '../mcp/index.ts';

const SHUTDOWN_BUDGET_MS = 10_000;
const START_RETRY_MS = 500;

/**
 * The composition root: reads the configuration, takes its port, starts or
 * joins NATS, builds the server with `createTether`, and stops it all on a
 * signal. Resolves with the exit code once everything has stopped.
 */
export async function serve(env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = loadConfig(env);
  const logger = jsonLogger(config.logLevel);
  logger.info('tether starting', { code: codeOrigin(), pid: process.pid, node: process.version });
  // The port first, answering 503 until ready: nothing started after this (an
  // embedded nats-server on a free port) can take it.
  const http = startingServer();
  const address = await listenOrExplain(http, config);
  // A start that fails from here on undoes what it started, last first, so that no port, connection or nats-server outlives it.
  const undo: Array<() => Promise<unknown>> = [() => closeHttp(http)];
  let nats: ServeNats;
  let nc: NatsConnection;
  let tether: Tether | undefined;
  let natsReady = true;
  let closing = false;
  try {
    nats = await serveNats(config, logger, env.PATH);
    undo.unshift(() => nats.stop());
    const url = nats.url;
    const nodeId = config.nodeId ?? (await keptNodeId(config.dataDir));
    // Named by node, so that `nats server report connections` and /connz tell the nodes apart.
    nc = await connectNats(url, { name: `tether ${nodeId}`, auth: config.natsAuth }).catch((err: unknown) => {
      throw new Error(`cannot reach NATS at ${withoutPassword(url)}: ${errorFields(err).error}`, { cause: err });
    });
    const connection = nc;
    undo.unshift(() => connection.close());
    watchConnection(nc, (connected) => {
      if (connected !== natsReady && !closing)
        logger.warn(connected ? 'NATS is back' : 'NATS connection lost; reconnecting');
      if (connected && !natsReady) tether?.metrics.natsReconnected();
      natsReady = connected;
    });
    const { replicas } = config;
    const opened = await whileJetStreamStarts(config, logger, async () => ({
      stores: await jetStreamStores(connection, {
        replicas,
        tail: config.resumeTail,
        onFollowError: (err) => logger.warn('the live feed failed; it starts again where it stopped', errorFields(err)),
      }),
      // Sealed where every node reads them; a shared NATS without a key refuses secrets (another node could not use them).
      secrets: config.secretsKey
        ? await kvSecretStore(connection, { key: config.secretsKey, replicas })
        : config.natsUrl
          ? ('refuse' as const)
          : undefined,
      cluster: await kvClusterStore(connection, { leaseMs: config.leaseMs, replicas }),
    }));
    const sandbox = await chooseSandbox(config, logger);
    tether = createTether({
      stores: opened.stores,
      runtimes: localRuntimeProvider({
        workspaceRoot: config.workspacesDir,
        commandTimeoutMs: config.commandTimeoutMs,
        outputCapBytes: config.outputCapBytes,
        // A frozen node's commands die within half a lease, before another node can take the conversation.
        heartbeatTimeoutMs: config.leaseMs / 2,
        sandbox,
      }),
      secrets: opened.secrets,
      // Every node on one NATS is one cluster: ownership by heartbeat and owner records.
      cluster: {
        nodeId,
        leaseMs: config.leaseMs,
        store: opened.cluster,
        url: config.publicUrl ?? urlOf(address, 'http'),
        bus: natsClusterBus(nc, nodeId),
      },
      agent: agentOf(config, logger),
      mcp: new McpHub({ ...config.mcp, heartbeatMs: config.leaseMs / 2, logger }),
      confirmUnknown: config.confirmUnknown,
      processMetrics: true,
      logger,
      limits: config.limits,
      commandTimeoutMs: config.commandTimeoutMs,
      server: {
        http,
        authenticate: authenticator({ tokens: config.tokens, jwtSecret: config.jwtSecret }),
        maxFrameBytes: config.maxFrameBytes,
        maxBodyBytes: config.maxBodyBytes,
        maxPendingBytes: config.maxPendingBytes,
        ws: config.ws,
        ready: async () => natsReady && (await natsAnswers(connection)),
        page: pageAssets(),
        // The operator alone (no tokens) may clone from this machine's folders.
        fileRepositories: config.repoFileUrls || (config.tokens.size === 0 && config.jwtSecret === undefined),
        // Without tokens anyone who reaches the port acts as `local`: only under this machine's names, so that
        // another site's name resolving here (DNS rebinding) cannot. With tokens the Host is not checked.
        allowedHosts:
          config.tokens.size === 0 && config.jwtSecret === undefined
            ? allowedHosts(config.host, config.publicUrl)
            : undefined,
      },
    });
    await tether.start();
    logger.info('node joined', { node_id: nodeId, lease_ms: config.leaseMs });
  } catch (err) {
    closing = true;
    for (const step of undo) await step().catch(() => undefined);
    throw err;
  }
  logger.info('tether listening', {
    url: urlOf(address, 'http'),
    page: `${urlOf(address, 'http')}/`,
    ws: `${urlOf(address, 'ws')}/ws`,
    nats: nats.url,
  });
  // Conversations that were mid-task when the last process stopped finish by themselves.
  void tether.host.recover().catch((err: unknown) => logger.error('recovery failed', errorFields(err)));

  return new Promise<number>((resolve) => {
    let stopping = false;
    const shutdown = async (reason: string, code: number) => {
      if (stopping) return;
      stopping = true;
      logger.info('shutting down', { reason });
      const hardStop = setTimeout(() => {
        logger.error('shutdown took too long; exiting');
        void nats.stop().finally(() => process.exit(code || 1));
      }, SHUTDOWN_BUDGET_MS);
      hardStop.unref();
      const steps: Array<[string, () => Promise<unknown>]> = [
        ['server and sessions', () => tether.close()],
        [
          'nats connection',
          () => {
            closing = true;
            return nc.drain();
          },
        ],
        ['embedded nats-server', () => nats.stop()],
      ];
      for (const [name, step] of steps) {
        await step().catch((err: unknown) => logger.warn(`stopping ${name} failed`, errorFields(err)));
      }
      clearTimeout(hardStop);
      resolve(code);
    };
    process.once('SIGINT', () => void shutdown('SIGINT', 0));
    process.once('SIGTERM', () => void shutdown('SIGTERM', 0));
    process.on('uncaughtException', (err) => {
      logger.error('uncaught exception', errorFields(err));
      void shutdown('crash', 1);
    });
    process.on('unhandledRejection', (err) => logger.error('unhandled rejection', errorFields(err)));
  });
}

/**
 * Runs `open` (creating or updating the stream and buckets) again while
 * JetStream does not answer yet or its cluster is still forming (a node started
 * beside its nats-servers), for up to TETHER_NATS_START_TIMEOUT_MS. Settings
 * NATS refuses name the variable behind them.
 */
async function whileJetStreamStarts<T>(config: Config, logger: Logger, open: () => Promise<T>): Promise<T> {
  const deadline = performance.now() + config.natsStartTimeoutMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await open();
    } catch (err) {
      if (!passesWithTime(err) || performance.now() + START_RETRY_MS >= deadline) throw settingsNamed(err, config);
      if (attempt === 1) logger.warn('waiting for JetStream', { reason: errorFields(err).error });
      await sleep(START_RETRY_MS);
    }
  }
}

function settingsNamed(err: unknown, config: Config): unknown {
  if (!(err instanceof StoreSettingsError)) return err;
  const variable =
    err.setting === 'replicas'
      ? `TETHER_REPLICAS=${config.replicas} (at most the number of nats-servers in the cluster; 1 on a single server)`
      : `TETHER_LEASE_MS=${config.leaseMs} (the heartbeat bucket's TTL; every node must use the same lease)`;
  return new Error(`${variable}: ${err.message}`, { cause: err });
}

/**
 * This node's URL from the address it listens on: the machine's host name when
 * that is every interface (0.0.0.0, ::), which no client could dial.
 */
function urlOf(address: AddressInfo, scheme: 'http' | 'ws'): string {
  const any = address.address === '0.0.0.0' || address.address === '::';
  const host = any ? hostname() : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `${scheme}://${host}:${address.port}`;
}

/**
 * The node id kept in the data dir, generated the first time: a node that
 * restarts is the same node, so it takes back what it owned at once instead
 * of waiting for its old heartbeat to age out.
 */
async function keptNodeId(dataDir: string): Promise<string> {
  const file = join(dataDir, 'node-id');
  const kept = (await readFile(file, 'utf8').catch(() => '')).trim();
  if (/^[A-Za-z0-9_.-]{1,64}$/.test(kept)) return kept;
  const id = `node-${randomBytes(4).toString('hex')}`;
  await mkdir(dataDir, { recursive: true });
  await writeFile(file, `${id}\n`);
  return id;
}

function agentOf(config: Config, logger: Logger) {
  logger.info(
    'agent',
    config.llm
      ? { kind: 'llm', base_url: config.llm.baseUrl, model: config.llm.model, stream: config.llm.stream }
      : { kind: 'scripted', delta_ms: config.agentDeltaMs },
  );
  return config.llm
    ? llmAgent(config.llm)
    : scriptedAgent({ delayMs: config.agentDelayMs, deltaMs: config.agentDeltaMs });
}

function closeHttp(http: Server): Promise<void> {
  return new Promise((resolve) => {
    http.close(() => resolve());
    http.closeAllConnections();
  });
}

async function listenOrExplain(http: Server, config: Config): Promise<AddressInfo> {
  try {
    return await new Promise<AddressInfo>((resolve, reject) => {
      http.once('error', reject);
      http.listen(config.port, config.host, () => {
        http.off('error', reject);
        resolve(http.address() as AddressInfo);
      });
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EADDRINUSE' ? 'is in use' : code === 'EACCES' ? 'is not allowed' : 'failed';
    throw new Error(`listening on ${config.host}:${config.port} ${why} (${code}): set TETHER_PORT or TETHER_HOST`, {
      cause: err,
    });
  }
}

/** Whether this process runs the compiled JavaScript in dist/ or the TypeScript sources (tests, tsx). */
function codeOrigin(): string {
  const file = fileURLToPath(import.meta.url);
  return file.endsWith('.js') ? 'dist (compiled JavaScript)' : 'sources (TypeScript through tsx)';
}

/**
 * The sandbox of this node's shells: bwrap when TETHER_SANDBOX says so (a
 * bwrap that cannot run here stops the start) or, under `auto`, when it can
 * run; else none, with a warning. bwrap is tried once, as the runtimes will run it.
 */
async function chooseSandbox(config: Config, logger: Logger): Promise<SandboxOptions | undefined> {
  const { mode, network } = config.sandbox;
  if (mode === 'none') return undefined;
  const refused = await probeBwrap({ network });
  if (refused === null) return { network };
  if (mode === 'bwrap') throw new Error(`TETHER_SANDBOX=bwrap, but ${refused}`);
  logger.warn('commands run without a sandbox (TETHER_SANDBOX=auto): install bubblewrap to confine them', {
    reason: refused,
  });
  return undefined;
}
