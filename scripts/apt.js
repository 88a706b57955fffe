// Installs one of Debian's packages with apt-get when we are root (npm test and
// npm start on a fresh machine); otherwise says how. The server never calls it.
import { execFileSync } from 'node:child_process';

/** Installs Debian package `name`; throws `howTo` (with apt-get's failure) when not root or when apt-get fails. */
export function aptInstall(name, howTo, log = () => {}) {
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!isRoot) throw new Error(howTo);
  log(`${name} is missing; installing Debian package ${name} with apt-get ...`);
  const aptEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'ignore', 'inherit'], env: aptEnv });
    execFileSync('apt-get', ['install', '-y', '-qq', name], { stdio: ['ignore', 'ignore', 'inherit'], env: aptEnv });
  } catch (err) {
    throw new Error(`apt-get install ${name} failed (${err instanceof Error ? err.message : err}). ${howTo}`, {
      cause: err,
    });
  }
}
