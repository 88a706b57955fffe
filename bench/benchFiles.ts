// `npm run bench` compiles the bench and the server with tsc (tsconfig.bench.json,
// to dist-bench/) and runs plain node, so every measured process runs compiled
// JavaScript as `npm start` does; `tsx bench/run.ts` still works for a quick try.
// Child processes and files follow whichever of the two this is.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const COMPILED = import.meta.url.endsWith('.js');

/** How the bench runs: compiled JavaScript, or TypeScript through tsx. */
export const CODE_KIND = COMPILED ? 'compiled JavaScript (tsc, dist-bench/)' : 'TypeScript through tsx';
/** The repository root (child processes start there). */
export const REPO_ROOT = fileURLToPath(new URL(COMPILED ? '../..' : '..', import.meta.url));
/** bench/RESULTS.md in the repository, wherever the bench runs from. */
export const RESULTS_FILE = join(REPO_ROOT, 'bench', 'RESULTS.md');
/** Node flags of a child process: tsx's loader only when running the sources. */
export const NODE_FLAGS: readonly string[] = COMPILED ? [] : ['--import', 'tsx'];
/** Node flags of a child process whose heap is measured. */
export const GC_NODE_FLAGS: readonly string[] = ['--expose-gc', ...NODE_FLAGS];

/** The bench file `name` (no extension) beside this one, compiled or not. */
export function benchFile(name: string): URL {
  return new URL(`./${name}.${COMPILED ? 'js' : 'ts'}`, import.meta.url);
}

/** `tether`'s entry point (src/cli/main), compiled or not, as `npm start` runs it from dist/. */
export function serverEntry(): URL {
  return new URL(`../src/cli/main.${COMPILED ? 'js' : 'ts'}`, import.meta.url);
}
