import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const entry = fileURLToPath(new URL('../../machines/inspect.ts', import.meta.url));

describe('machines/inspect.ts', () => {
  it('bundles for a browser: nothing it imports, however deep, needs node:* or a Node built-in', async () => {
    const result = await build({
      entryPoints: [entry],
      bundle: true,
      platform: 'browser',
      format: 'esm',
      write: false,
      logLevel: 'silent',
      metafile: true,
    });
    expect(result.errors).toEqual([]);
    const inputs = Object.keys(result.metafile.inputs);
    expect(inputs.filter((path) => path.startsWith('node:'))).toEqual([]);
    expect(inputs).toContain('machines/fold.ts');
  });

  it('is refused when a module it imports needs Node (the check can fail)', async () => {
    await expect(
      build({
        stdin: { contents: `import '${entry}'; import 'node:fs';`, resolveDir: '.', loader: 'ts' },
        bundle: true,
        platform: 'browser',
        write: false,
        logLevel: 'silent',
      }),
    ).rejects.toThrow(/node:fs/);
  });
});
