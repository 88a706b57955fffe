import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A file of the page, as served. */
export interface PageAsset {
  type: string;
  body: Buffer;
}

const TYPES: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'app.js.map': 'application/json; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
};

/** The page loads nothing but its own server's files, and talks to nothing else. */
export const PAGE_CSP =
  "default-src 'self'; connect-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** The package's root: the nearest folder above this module with a package.json (from src/ or dist/src/). */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('no package.json above the server module');
    dir = up;
  }
  return dir;
}

/**
 * The page's built files (dist/page/, made by `npm run build`, `npm start`
 * and `npm test`), read once. Undefined for a name that is not one of them,
 * or when the page was not built.
 */
export function pageAssets(dir = join(packageRoot(), 'dist', 'page')): (name: string) => PageAsset | undefined {
  const cache = new Map<string, PageAsset>();
  return (name) => {
    const type = TYPES[name];
    if (type === undefined) return undefined;
    // A file not built yet is looked for again at the next request (a build may come after the start).
    if (!cache.has(name) && existsSync(join(dir, name))) cache.set(name, { type, body: readFileSync(join(dir, name)) });
    return cache.get(name);
  };
}
