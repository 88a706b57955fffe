#!/usr/bin/env node
// Makes sure Debian's bubblewrap (`bwrap`) is on this machine: the sandbox of
// conversations' shells (TETHER_SANDBOX). Installed with apt-get when we are
// root; otherwise a message that says how. `npm test` needs it (the sandbox
// tests run real bwrap): run directly, this script exits non-zero without it.
// `npm start` only warns: the server then runs unsandboxed under the default
// TETHER_SANDBOX=auto, and says so. The server itself never installs anything.
import { execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { aptInstall } from './apt.js';

const HOW_TO_INSTALL =
  'bubblewrap (bwrap) was not found; it sandboxes the shells of conversations. ' +
  'Install it with `sudo apt-get install bubblewrap` (Debian), then run the command again.';

function present() {
  try {
    execFileSync('bwrap', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Installs bubblewrap when missing and we are root; throws a message that says how otherwise. */
export function ensureBwrap(log = () => {}) {
  if (present()) return;
  aptInstall('bubblewrap', HOW_TO_INSTALL, log);
  if (!present()) throw new Error(`apt-get finished but bwrap is still missing. ${HOW_TO_INSTALL}`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    ensureBwrap((line) => console.error(line));
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
}
