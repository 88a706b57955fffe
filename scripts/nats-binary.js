// Finds nats-server, installing Debian's package when it is missing and we may.
// Plain JavaScript so both npm scripts and the TypeScript server can use it.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const CANDIDATES = ['/usr/sbin/nats-server', '/usr/bin/nats-server', '/usr/local/bin/nats-server'];

export function findNatsServer(env = process.env) {
  if (env.NATS_SERVER_BIN) return existsSync(env.NATS_SERVER_BIN) ? env.NATS_SERVER_BIN : null;
  const onPath = spawnSync('sh', ['-c', 'command -v nats-server'], { encoding: 'utf8' });
  if (onPath.status === 0 && onPath.stdout.trim()) return onPath.stdout.trim();
  return CANDIDATES.find((p) => existsSync(p)) ?? null;
}

export const HOW_TO_INSTALL =
  'nats-server was not found. Install it with `sudo apt-get install nats-server` (Debian/Ubuntu), ' +
  'put a nats-server binary on PATH or in NATS_SERVER_BIN, or point NATS_URL at a running server ' +
  'started with JetStream (`nats-server -js`).';

/** Returns the nats-server path, installing Debian's package first when root. */
export async function ensureNatsServer({ log = () => {}, env = process.env } = {}) {
  const found = findNatsServer(env);
  if (found) return found;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!isRoot) throw new Error(HOW_TO_INSTALL);
  log('nats-server is missing; installing Debian package nats-server with apt-get ...');
  const aptEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'ignore', 'inherit'], env: aptEnv });
    execFileSync('apt-get', ['install', '-y', '-qq', 'nats-server'], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: aptEnv,
    });
  } catch (err) {
    throw new Error(
      `apt-get install nats-server failed (${err instanceof Error ? err.message : err}). ${HOW_TO_INSTALL}`,
      { cause: err },
    );
  }
  const installed = findNatsServer(env);
  if (!installed) throw new Error(`apt-get finished but nats-server is still missing. ${HOW_TO_INSTALL}`);
  return installed;
}
