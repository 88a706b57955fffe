import { join } from 'node:path';
import { llmAgent, scriptedAgent } from '../agent/index.ts';
import { loadConfig } from '../config.ts';
import { findRunningNats } from './openStore.ts';
import { errorFields, jsonLogger } from '../logger.ts';
import { localRuntimeProvider } from '../runtime/index.ts';
import { authenticator, tetherServer } from '../server/index.ts';
import { SessionManager } from '../session/index.ts';
import {
  connectNats,
  jetStreamEventLog,
  kvConversationStore,
  kvSnapshotStore,
  startEmbeddedNats,
  natsAnswers,
  watchConnection,
  type EmbeddedNats,
} from '../store/index.ts';

const SHUTDOWN_BUDGET_MS = 10_000;

/**
 * The composition root: reads the configuration, starts or joins NATS, wires
 * the store, the session host and the server, and stops them all on a signal.
 * Resolves with the exit code once everything has stopped.
 */
export async function serve(env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = loadConfig(env);
  const logger = jsonLogger(config.logLevel);
  let embedded: EmbeddedNats | undefined;
  // nats-server's own info lines are noise here; its warnings and errors are not.
  const natsLog = (line: string) => {
    if (!/\[(INF|DBG|TRC)\]/.test(line)) logger.warn('nats-server', { line });
  };
  if (!config.natsUrl) {
    // nats-server 2.9 does not lock its store: two servers on one data dir would corrupt it.
    // One left by a Tether that just died stops within moments (its guard sees the pipe close): wait for it.
    let running = await findRunningNats(join(config.dataDir, 'nats'));
    for (let waited = 0; running && waited < 5_000; waited += 100) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      running = await findRunningNats(join(config.dataDir, 'nats'));
    }
    if (running) {
      throw new Error(
        `another nats-server (pid ${running.pid}, ${running.url}) already uses ${config.dataDir}: ` +
          'is another Tether running there? Stop it, or set TETHER_DATA_DIR or NATS_URL.',
      );
    }
    embedded = await startEmbeddedNats({ dataDir: config.dataDir, log: natsLog });
    logger.info('embedded nats-server started', { url: embedded.url, store: join(config.dataDir, 'nats') });
  }
  const natsUrl = config.natsUrl ?? embedded!.url;
  const stopEmbedded = () => embedded?.stop() ?? Promise.resolve();

  let nc;
  try {
    nc = await connectNats(natsUrl, { name: 'tether' });
  } catch (err) {
    await stopEmbedded();
    throw new Error(`cannot reach NATS at ${natsUrl}: ${errorFields(err).error}`, { cause: err });
  }
  let natsReady = true;
  let closing = false;
  watchConnection(nc, (connected) => {
    if (connected !== natsReady && !closing)
      logger.warn(connected ? 'NATS is back' : 'NATS connection lost; reconnecting');
    natsReady = connected;
  });
  const log = await jetStreamEventLog(nc);
  const conversations = await kvConversationStore(nc);
  const snapshots = await kvSnapshotStore(nc);
  const agent = config.llm ? llmAgent(config.llm) : scriptedAgent({ delayMs: config.agentDelayMs });
  logger.info(
    'agent',
    config.llm ? { kind: 'llm', base_url: config.llm.baseUrl, model: config.llm.model } : { kind: 'scripted' },
  );
  const manager = new SessionManager({
    log,
    conversations,
    snapshots,
    limits: config.limits,
    runtimes: localRuntimeProvider({
      workspaceRoot: join(config.dataDir, 'workspaces'),
      commandTimeoutMs: config.commandTimeoutMs,
      outputCapBytes: config.outputCapBytes,
    }),
    agentFor: () => agent,
    logger,
    commandTimeoutMs: config.commandTimeoutMs,
  });
  const server = tetherServer({
    manager,
    logger,
    authenticate: authenticator({ tokens: config.tokens, jwtSecret: config.jwtSecret }),
    maxFrameBytes: config.maxFrameBytes,
    maxBodyBytes: config.maxBodyBytes,
    maxPendingBytes: config.maxPendingBytes,
    ws: config.ws,
    ready: async () => natsReady && (await natsAnswers(nc)),
  });
  const address = await server.listen(config.port, config.host);
  const base = `http://${address.address}:${address.port}`;
  logger.info('tether listening', { url: base, ws: `ws://${address.address}:${address.port}/ws`, nats: natsUrl });
  // Conversations that were mid-task when the last process stopped finish by themselves.
  void manager.recover().catch((err: unknown) => logger.error('recovery failed', errorFields(err)));

  return new Promise<number>((resolve) => {
    let stopping = false;
    const shutdown = async (reason: string, code: number) => {
      if (stopping) return;
      stopping = true;
      logger.info('shutting down', { reason });
      const hardStop = setTimeout(() => {
        logger.error('shutdown took too long; exiting');
        void stopEmbedded().finally(() => process.exit(code || 1));
      }, SHUTDOWN_BUDGET_MS);
      hardStop.unref();
      const steps: Array<[string, () => Promise<unknown>]> = [
        ['server', () => server.close()],
        ['sessions', () => manager.shutdown()],
        [
          'nats connection',
          () => {
            closing = true;
            return nc.drain();
          },
        ],
        ['embedded nats-server', stopEmbedded],
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
    // An embedded nats-server that dies is started again on the same port and
    // store; the NATS client reconnects to it by itself.
    const superviseEmbedded = (server: EmbeddedNats) =>
      server.onExit(() => {
        if (stopping) return;
        logger.error('embedded nats-server exited unexpectedly; starting it again', { port: server.port });
        const restart = async (attempt: number): Promise<void> => {
          try {
            embedded = await startEmbeddedNats({ dataDir: config.dataDir, log: natsLog, port: server.port });
            logger.info('embedded nats-server started again', { url: embedded.url });
            superviseEmbedded(embedded);
          } catch (err) {
            logger.error('starting nats-server again failed', { attempt, ...errorFields(err) });
            if (!stopping) setTimeout(() => void restart(attempt + 1), Math.min(5_000, 250 * 2 ** attempt)).unref();
          }
        };
        void restart(0);
      });
    if (embedded) superviseEmbedded(embedded);
  });
}
