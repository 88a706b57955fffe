#!/usr/bin/env node
// The `tether` command: runs the compiled server in dist/ (`npm run build`
// makes it; `npm start` builds it when it is missing or stale).
import { existsSync } from 'node:fs';

const main = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  process.stderr.write('tether: dist/ is missing; build it with `npm run build` (or start with `npm start`)\n');
  process.exit(1);
}
await import(main.href);
