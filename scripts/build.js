#!/usr/bin/env node
// Compiles the server (src/ and machines/) to dist/ with tsc, and says when
// dist/ is stale. `node scripts/build.js` always builds; `--if-stale` builds
// only when dist/ is missing or older than a source file (npm start, npm test).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** What the build reads: a change to any of these (or a file added or removed in them) makes dist/ stale. */
const SOURCES = ['src', 'machines', 'tsconfig.json', 'tsconfig.build.json', 'package.json'];
/** Written last by a successful build: its time is the build's. */
export const STAMP = join(ROOT, 'dist', '.built');

/** The newest modification time under the given paths (directories count: adding or removing a file changes theirs). */
function newest(paths) {
  let latest = 0;
  const visit = (path) => {
    const stat = statSync(path, { throwIfNoEntry: false });
    if (!stat) return;
    latest = Math.max(latest, stat.mtimeMs);
    if (stat.isDirectory()) for (const entry of readdirSync(path)) visit(join(path, entry));
  };
  for (const path of paths) visit(join(ROOT, path));
  return latest;
}

/** Why dist/ must be built, or null when it is up to date. */
export function staleReason() {
  const built = statSync(STAMP, { throwIfNoEntry: false });
  if (!built) return 'dist/ has not been built';
  return newest(SOURCES) > built.mtimeMs ? 'the sources changed since dist/ was built' : null;
}

/** Builds dist/ from scratch with tsc; throws with tsc's output when it fails. */
export function build({ log = (line) => console.error(line) } = {}) {
  let tsc;
  try {
    tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  } catch {
    throw new Error(
      'building dist/ needs TypeScript, which is a development dependency: run `npm install` (not --omit=dev), then `npm run build`',
    );
  }
  log('tether: compiling src/ and machines/ to dist/ (tsc -p tsconfig.build.json) ...');
  const started = Date.now();
  rmSync(join(ROOT, 'dist'), { recursive: true, force: true });
  const result = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: ROOT, encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`tsc failed:\n${result.stdout}${result.stderr}`);
  writeFileSync(STAMP, `${new Date().toISOString()}\n`);
  log(`tether: dist/ built in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/** Builds when dist/ is stale, saying why; does nothing otherwise. */
export function buildIfStale({ log = (line) => console.error(line) } = {}) {
  const reason = staleReason();
  if (reason === null) return false;
  log(`tether: ${reason}`);
  build({ log });
  return true;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    if (process.argv.includes('--if-stale')) buildIfStale();
    else build();
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
  if (!existsSync(STAMP)) process.exit(1);
}
