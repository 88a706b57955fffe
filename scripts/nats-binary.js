// Finds nats-server, installing Debian's package when it is missing and we may.
// Plain JavaScript so both npm scripts and the TypeScript server can use it.
// The rules match src/store/natsBinary.ts (which the server uses and which never
// installs): NATS_SERVER_BIN when set, else PATH, then the usual places; executable files only.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { aptInstall } from './apt.js';

const USUAL_PLACES = ['/usr/sbin', '/usr/bin', '/usr/local/bin'];

const isExecutable = (file) => {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

export function findNatsServer(env = process.env) {
  if (env.NATS_SERVER_BIN) return isExecutable(env.NATS_SERVER_BIN) ? env.NATS_SERVER_BIN : null;
  const dirs = [...(env.PATH ?? '').split(delimiter).filter(Boolean), ...USUAL_PLACES];
  return dirs.map((dir) => join(dir, 'nats-server')).find(isExecutable) ?? null;
}

export const HOW_TO_INSTALL =
  'nats-server was not found. Install it with `sudo apt-get install nats-server` (Debian/Ubuntu), ' +
  'put a nats-server binary on PATH or in NATS_SERVER_BIN, or point NATS_URL at a running server ' +
  'started with JetStream (`nats-server -js`).';

/** Returns the nats-server path, installing Debian's package first when root. */
export async function ensureNatsServer({ log = () => {}, env = process.env } = {}) {
  const found = findNatsServer(env);
  if (found) return found;
  // An explicit binary that is not there is a mistake to report, not a reason to install another.
  if (env.NATS_SERVER_BIN)
    throw new Error(`NATS_SERVER_BIN=${env.NATS_SERVER_BIN} is not an executable file. ${HOW_TO_INSTALL}`);
  aptInstall('nats-server', HOW_TO_INSTALL, log);
  const installed = findNatsServer(env);
  if (!installed) throw new Error(`apt-get finished but nats-server is still missing. ${HOW_TO_INSTALL}`);
  return installed;
}
