#!/usr/bin/env node
// Compiles the server (protocol/, src/ and machines/) to dist/ with tsc, bundles the page
// (page/, with esbuild) into dist/page/, and says when dist/ is stale. `node scripts/build.js` always builds; `--if-stale` builds
// only when dist/ is missing or older than a source file (npm start, npm test).
import { spawnSync } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  existsSync,
  openSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** What the build reads: a change to any of these (or a file added or removed in them) makes dist/ stale. */
const SOURCES = ['protocol', 'src', 'machines', 'page', 'tsconfig.json', 'tsconfig.build.json', 'package.json'];
/** The page's files copied as they are beside its bundle. */
const PAGE_STATIC = ['index.html', 'style.css'];
const DIST = join(ROOT, 'dist');
/** Written last by a successful build, dated when the build started: a source saved during it stays newer. */
export const STAMP = join(DIST, '.built');
/** Held by the one build that runs at a time (npm test and npm start in two terminals, say). */
const LOCK = join(ROOT, 'dist.lock');
const LOCK_WAIT_MS = 5 * 60_000;

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

/**
 * Builds dist/ from scratch with tsc; throws with tsc's output when it fails.
 * It compiles into a folder of its own and swaps it in only when tsc succeeded
 * (noEmitOnError), so a failed build leaves the last good dist/ as it was.
 */
export function build({ log = (line) => console.error(line) } = {}) {
  withLock(() => compile(log));
}

function compile(log) {
  let tsc;
  try {
    tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  } catch (err) {
    throw new Error(
      'building dist/ needs TypeScript, which is a development dependency: run `npm install` (not --omit=dev), then `npm run build`',
      { cause: err },
    );
  }
  log('tether: compiling protocol/, src/ and machines/ to dist/ (tsc -p tsconfig.build.json) and bundling page/ ...');
  const started = new Date();
  const fresh = join(ROOT, `dist.tmp-${process.pid}`);
  const old = join(ROOT, `dist.old-${process.pid}`);
  rmSync(fresh, { recursive: true, force: true });
  try {
    const args = [tsc, '-p', 'tsconfig.build.json', '--outDir', fresh];
    const result = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`tsc failed; dist/ is left as it was:\n${result.stdout}${result.stderr}`);
    bundlePage(join(fresh, 'page'));
    const stamp = join(fresh, '.built');
    writeFileSync(stamp, `${started.toISOString()}\n`);
    utimesSync(stamp, started, started);
    if (existsSync(DIST)) renameSync(DIST, old);
    renameSync(fresh, DIST);
  } finally {
    rmSync(fresh, { recursive: true, force: true });
    rmSync(old, { recursive: true, force: true });
  }
  log(`tether: dist/ built in ${((Date.now() - started.getTime()) / 1000).toFixed(1)} s`);
}

/**
 * The page: page/main.ts and what it imports (machines/ among them) in one
 * browser bundle, with its HTML and CSS beside it. Nothing is loaded from
 * elsewhere at run time.
 */
function bundlePage(outDir) {
  let esbuild;
  try {
    esbuild = createRequire(import.meta.url)('esbuild');
  } catch (err) {
    throw new Error('bundling the page needs esbuild, a development dependency: run `npm install`', { cause: err });
  }
  try {
    esbuild.buildSync({
      entryPoints: [join(ROOT, 'page', 'main.ts')],
      outfile: join(outDir, 'app.js'),
      bundle: true,
      platform: 'browser',
      format: 'esm',
      target: 'es2022',
      minify: true,
      sourcemap: 'linked',
      logLevel: 'silent',
    });
  } catch (err) {
    throw new Error(`bundling the page failed; dist/ is left as it was:\n${err.message}`, { cause: err });
  }
  for (const name of PAGE_STATIC) copyFileSync(join(ROOT, 'page', name), join(outDir, name));
}

/** Runs `work` holding the build lock; a lock left by a process that died is taken over. */
function withLock(work) {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      const fd = openSync(LOCK, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      if (!holderAlive()) {
        rmSync(LOCK, { force: true });
        continue;
      }
      if (Date.now() > deadline)
        throw new Error(`another build (${LOCK}) has held the lock for too long`, { cause: err });
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    }
  }
  try {
    work();
  } finally {
    unlinkSync(LOCK);
  }
}

function holderAlive() {
  let pid;
  try {
    pid = Number(readFileSync(LOCK, 'utf8') || NaN);
  } catch {
    return false; // Released meanwhile.
  }
  if (!Number.isSafeInteger(pid) || pid <= 0) return true; // Being written: wait for it.
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/** Builds when dist/ is stale, saying why; does nothing otherwise (nor when another build just made it fresh). */
export function buildIfStale({ log = (line) => console.error(line) } = {}) {
  if (staleReason() === null) return false;
  let built = false;
  withLock(() => {
    const reason = staleReason();
    if (reason === null) return;
    log(`tether: ${reason}`);
    compile(log);
    built = true;
  });
  return built;
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
