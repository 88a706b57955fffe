import { build, type BuildOptions, type Metafile } from 'esbuild';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const path = (relative: string) => fileURLToPath(new URL(relative, import.meta.url));
const MACHINES = path('../../machines/index.ts');
const INSPECT = path('../../machines/inspect.ts');
const PROTOCOL = path('../../protocol/index.ts');

const forBrowser: BuildOptions = {
  bundle: true,
  platform: 'browser',
  format: 'esm',
  write: false,
  logLevel: 'silent',
  metafile: true,
};

/** Every module a browser bundle of `entry` (or of `stdin`) takes in, however deep. */
async function inputs(what: { entry: string } | { stdin: string }): Promise<string[]> {
  const result = await build({
    ...forBrowser,
    ...('entry' in what
      ? { entryPoints: [what.entry] }
      : { stdin: { contents: what.stdin, resolveDir: '.', loader: 'ts' } }),
  });
  expect(result.errors).toEqual([]);
  return Object.keys((result.metafile as Metafile).inputs);
}

const zodIn = (modules: string[]) => modules.filter((module) => /(^|\/)node_modules\/zod\//.test(module));

describe('machines/ in a browser bundle', () => {
  it('bundles machines/inspect.ts for a browser: nothing it imports, however deep, needs node:* or a Node built-in', async () => {
    const modules = await inputs({ entry: INSPECT });
    expect(modules.filter((module) => module.startsWith('node:'))).toEqual([]);
    expect(modules).toContain('machines/fold.ts');
  });

  it('is refused when a module it imports needs Node (the check can fail)', async () => {
    await expect(
      build({
        ...forBrowser,
        stdin: { contents: `import '${INSPECT}'; import 'node:fs';`, resolveDir: '.', loader: 'ts' },
      }),
    ).rejects.toThrow(/node:fs/);
  });

  it('bundles machines/index.ts without zod: machines/ takes protocol types only, so no schema comes along', async () => {
    const modules = await inputs({ entry: MACHINES });
    expect(modules).toContain('machines/decide.ts');
    expect(modules.filter((module) => module.startsWith('protocol/'))).toEqual([]);
    expect(zodIn(modules)).toEqual([]);
  });

  it('sees zod come in with one protocol value beside machines/index.ts (the check can fail)', async () => {
    const modules = await inputs({
      stdin: `export * from '${MACHINES}'; export { EVENT_VERSION } from '${PROTOCOL}';`,
    });
    expect(modules).toContain('protocol/event.ts');
    expect(zodIn(modules).length).toBeGreaterThan(0);
  });
});
