import { existsSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Config } from '../config.ts';
import {
  connectNats,
  jetStreamEventLog,
  locateNatsServer,
  startEmbeddedNats,
  type EmbeddedNats,
  type EventLog,
  type NatsConnection,
} from '../store/index.ts';

/** Where the event log was found, for messages: `NATS_URL`, a running Tether's embedded server, or one started here. */
export type StoreOrigin = 'nats_url' | 'running_embedded' | 'started_embedded';

export interface OpenedEventLog {
  log: EventLog;
  url: string;
  origin: StoreOrigin;
  /** Closes the connection, and stops the nats-server when this opened it. */
  close(): Promise<void>;
}

/** An embedded nats-server that a running Tether (or another tool) has on the data dir. */
export interface RunningNats {
  pid: number;
  url: string;
}

export interface OpenEventLogOptions {
  /** NATS connection name. */
  name: string;
  /** nats-server's warnings and errors, when this starts it. */
  log?: (line: string) => void;
  /** The PATH to find nats-server on, when this starts it. */
  path?: string;
}

/** nats-server's own info, debug and trace lines: noise for Tether's log; its warnings and errors are not. */
export const isNatsNoise = (line: string): boolean => /\[(INF|DBG|TRC)\]/.test(line);

/**
 * Opens the event log the way `tether serve` finds it: `NATS_URL` when set;
 * otherwise the embedded store under `<TETHER_DATA_DIR>/nats`. nats-server
 * 2.9 does not lock its store directory, and two servers on one store corrupt
 * it, so a server that already runs there (a Tether serving) is joined through
 * its ports file; only when none runs is one started, and stopped on close().
 */
export async function openEventLog(config: Config, options: OpenEventLogOptions): Promise<OpenedEventLog> {
  let url = config.natsUrl;
  let origin: StoreOrigin = 'nats_url';
  let embedded: EmbeddedNats | undefined;
  if (url === undefined) {
    const storeDir = join(config.dataDir, 'nats');
    if (!existsSync(storeDir)) {
      throw new Error(`no Tether store at ${storeDir}: set TETHER_DATA_DIR to the server's data dir, or NATS_URL`);
    }
    const running = await findRunningNats(storeDir);
    if (running) {
      url = running.url;
      origin = 'running_embedded';
    } else {
      const log = options.log;
      embedded = await startEmbeddedNats({
        dataDir: config.dataDir,
        binary: locateNatsServer({ binary: config.natsServerBin, path: options.path }),
        log: log && ((line) => !isNatsNoise(line) && log(line)),
      });
      url = embedded.url;
      origin = 'started_embedded';
    }
  }
  const stopEmbedded = () => embedded?.stop() ?? Promise.resolve();
  let nc: NatsConnection;
  try {
    nc = await connectNats(url, { name: options.name, auth: config.natsAuth });
  } catch (err) {
    await stopEmbedded();
    throw err;
  }
  try {
    const log = await jetStreamEventLog(nc);
    return {
      log,
      url,
      origin,
      close: async () => {
        await nc.close().catch(() => {});
        await stopEmbedded();
      },
    };
  } catch (err) {
    await nc.close().catch(() => {});
    await stopEmbedded();
    throw err;
  }
}

/**
 * The nats-server serving `storeDir`, if one runs. startEmbeddedNats passes
 * `--ports_file_dir <storeDir>`, so a running server has left
 * `nats-server_<pid>.ports` there; the server deletes it on a clean exit, but
 * a killed one leaves it behind, so the pid must still be a live nats-server.
 */
export async function findRunningNats(storeDir: string): Promise<RunningNats | undefined> {
  const names = await readdir(storeDir).catch(() => [] as string[]);
  for (const name of names) {
    const match = /_(\d+)\.ports$/.exec(name);
    if (!match) continue;
    const pid = Number(match[1]);
    if (!(await isLiveNatsServer(pid))) continue;
    let ports: { nats?: unknown };
    try {
      ports = JSON.parse(await readFile(join(storeDir, name), 'utf8')) as { nats?: unknown };
    } catch {
      continue; // Being written, or gone since readdir.
    }
    const url = Array.isArray(ports.nats) ? ports.nats.find((u): u is string => typeof u === 'string') : undefined;
    if (url) return { pid, url };
  }
  return undefined;
}

async function isLiveNatsServer(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it runs, as another user.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  // Where /proc exists, rule out a zombie and a pid reused by another program.
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return true;
  if (/^\d+ \(.*\) Z/.test(stat)) return false;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return cmdline === '' || cmdline.includes('nats-server');
}
