#!/usr/bin/env node
// `npm start`: everything a fresh checkout needs before `tether serve`, then the
// compiled server. nats-server is installed (or explained) only when Tether must
// start its own (no NATS_URL); dist/ is built only when missing or stale, so a
// built checkout starts without TypeScript or tsx installed.
import { buildIfStale } from './build.js';
import { ensureBwrap } from './ensure-bwrap.js';
import { ensureNatsServer } from './nats-binary.js';

try {
  if (!process.env.NATS_URL) await ensureNatsServer({ log: (line) => console.error(line) });
  if (process.env.TETHER_SANDBOX !== 'none') ensureSandbox();
  buildIfStale();
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
await import('../bin/tether.js');

/** bubblewrap for the shells' sandbox: without it, TETHER_SANDBOX=auto runs them unsandboxed (the server warns). */
function ensureSandbox() {
  try {
    ensureBwrap((line) => console.error(line));
  } catch (err) {
    if (process.env.TETHER_SANDBOX === 'bwrap') throw err;
    console.error(`warning: ${err instanceof Error ? err.message : String(err)}`);
  }
}
