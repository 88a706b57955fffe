import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Where Debian's package and manual installs put nats-server, for a PATH that lacks them (sbin). */
const USUAL_PLACES = ['/usr/sbin', '/usr/bin', '/usr/local/bin'];

/** What to do about a missing nats-server; the npm scripts install it, the server never does. */
export const INSTALL_NATS_SERVER =
  'install it with `sudo apt-get install nats-server` (Debian/Ubuntu; `npm start` does this when run as root), ' +
  'put a nats-server binary on PATH or in NATS_SERVER_BIN, or set NATS_URL to a running `nats-server -js`';

export class NatsServerNotFoundError extends Error {
  override name = 'NatsServerNotFoundError';
  readonly code = 'NATS_SERVER_NOT_FOUND';
  constructor(detail: string) {
    super(`${detail}: ${INSTALL_NATS_SERVER}`);
  }
}

export interface LocateNatsServerOptions {
  /** An explicit binary (NATS_SERVER_BIN); when given, it is the only candidate. */
  binary?: string;
  /** The PATH to search. */
  path?: string;
}

/** The nats-server binary to run, or NatsServerNotFoundError saying how to install one. */
export function locateNatsServer(options: LocateNatsServerOptions = {}): string {
  if (options.binary !== undefined) {
    if (isExecutable(options.binary)) return options.binary;
    throw new NatsServerNotFoundError(`NATS_SERVER_BIN=${options.binary} is not an executable file`);
  }
  const dirs = [...(options.path ?? '').split(delimiter).filter(Boolean), ...USUAL_PLACES];
  const found = dirs.map((dir) => join(dir, 'nats-server')).find(isExecutable);
  if (found === undefined) throw new NatsServerNotFoundError('nats-server was not found');
  return found;
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}
