import { join } from 'node:path';
import type { Config } from '../config.ts';
import { errorFields, type Logger } from '../logger.ts';
import { locateNatsServer, startEmbeddedNats, type EmbeddedNats } from '../store/index.ts';
import { findRunningNats, isNatsNoise } from './openStore.ts';

/** The NATS server `tether serve` uses: `NATS_URL`'s, or its own embedded one. */
export interface ServeNats {
  readonly url: string;
  /** Stops the embedded server, if there is one (and its supervision). */
  stop(): Promise<void>;
}

/**
 * With `NATS_URL`, that server. Otherwise starts `nats-server -js` on the data
 * dir (after waiting for one a Tether that just died left there), and starts it
 * again on the same port and store whenever it dies, so the client reconnects.
 */
export async function serveNats(config: Config, logger: Logger, path: string | undefined): Promise<ServeNats> {
  if (config.natsUrl) return { url: config.natsUrl, stop: () => Promise.resolve() };
  const binary = locateNatsServer({ binary: config.natsServerBin, path });
  const log = (line: string) => {
    if (!isNatsNoise(line)) logger.warn('nats-server', { line });
  };
  await waitForPreviousNats(join(config.dataDir, 'nats'));
  let embedded: EmbeddedNats = await startEmbeddedNats({ dataDir: config.dataDir, binary, log });
  logger.info('embedded nats-server started', { url: embedded.url, store: embedded.storeDir, binary });
  let stopping = false;
  const supervise = (server: EmbeddedNats) =>
    server.onExit(() => {
      if (stopping) return;
      logger.error('embedded nats-server exited unexpectedly; starting it again', { port: server.port });
      const restart = async (attempt: number): Promise<void> => {
        try {
          embedded = await startEmbeddedNats({ dataDir: config.dataDir, binary, log, port: server.port });
          logger.info('embedded nats-server started again', { url: embedded.url });
          supervise(embedded);
        } catch (err) {
          logger.error('starting nats-server again failed', { attempt, ...errorFields(err) });
          if (!stopping) setTimeout(() => void restart(attempt + 1), Math.min(5_000, 250 * 2 ** attempt)).unref();
        }
      };
      void restart(0);
    });
  supervise(embedded);
  return {
    url: embedded.url,
    stop: () => {
      stopping = true;
      return embedded.stop();
    },
  };
}

/**
 * nats-server 2.9 does not lock its store: two servers on one data dir would
 * corrupt it. One left by a Tether that just died stops within moments (its
 * guard sees the pipe close): wait for it, then refuse.
 */
async function waitForPreviousNats(storeDir: string): Promise<void> {
  let running = await findRunningNats(storeDir);
  for (let waited = 0; running && waited < 5_000; waited += 100) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    running = await findRunningNats(storeDir);
  }
  if (running) {
    throw new Error(
      `another nats-server (pid ${running.pid}, ${running.url}) already uses ${storeDir}: ` +
        'is another Tether running there? Stop it, or set TETHER_DATA_DIR or NATS_URL.',
    );
  }
}
