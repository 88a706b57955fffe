#!/usr/bin/env node
// Makes sure a nats-server binary is on this machine before the server or the
// tests need one: Debian's `nats-server` package, installed with apt-get when we
// are root, otherwise a clear message and a non-zero exit.
import { ensureNatsServer } from './nats-binary.js';

try {
  const path = await ensureNatsServer({ log: (line) => console.error(line) });
  if (process.env.TETHER_VERBOSE) console.error(`nats-server: ${path}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
