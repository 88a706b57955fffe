import { build, type BuildResult, type Metafile } from 'esbuild';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const MAIN = fileURLToPath(new URL('../../page/main.ts', import.meta.url));
const LIMIT_BYTES = 150 * 1024;

/** The page bundled as scripts/build.js bundles it (minified, for a browser), in memory. */
function bundle(extra = ''): Promise<BuildResult & { metafile: Metafile }> {
  return build({
    stdin: { contents: `import '${MAIN}';\n${extra}`, resolveDir: '.', loader: 'ts' },
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
    minify: true,
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
}

const size = (result: BuildResult) => result.outputFiles!.reduce((sum, file) => sum + file.contents.byteLength, 0);

describe('the page bundle', () => {
  it('is at most 150 KB minified and takes no zod: the page folds with machines/ and talks through src/client/', async () => {
    const result = await bundle();
    const modules = Object.keys(result.metafile.inputs);
    expect(modules.filter((module) => module.includes('node_modules/zod/'))).toEqual([]);
    expect(modules).toEqual(expect.arrayContaining(['machines/fold.ts', 'src/client/protocolClient.ts']));
    expect(size(result)).toBeLessThanOrEqual(LIMIT_BYTES);
  });

  it('would be over the limit with one protocol schema in it (the check can fail)', async () => {
    const result = await bundle(
      `import { ServerFrame } from '${fileURLToPath(new URL('../../protocol/index.ts', import.meta.url))}';\nconsole.log(ServerFrame);`,
    );
    expect(size(result)).toBeGreaterThan(LIMIT_BYTES);
  });
});
