import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type { McpStdioServer } from '../../src/mcp/index.ts';

const PROGRAMS = {
  server: fileURLToPath(new URL('./mcpTestServer.ts', import.meta.url)),
  hubChild: fileURLToPath(new URL('./mcpHubChild.ts', import.meta.url)),
};

/**
 * Bundles a test program (test/support/mcpTestServer.ts, mcpHubChild.ts) into
 * one plain module in `dir` and gives its path. Plain node starts it in a
 * fraction of what `--import tsx` takes (which compiles every module of the
 * SDK at each start), and from any directory: the test server runs in a
 * workspace, where `tsx` would not resolve.
 */
export async function buildMcpTestProgram(program: keyof typeof PROGRAMS, dir: string): Promise<string> {
  const outfile = join(dir, `${program}.mjs`);
  await build({
    entryPoints: [PROGRAMS[program]],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    logLevel: 'silent',
  });
  return outfile;
}

/** The configuration of a stdio server running the test server's bundle. */
export function mcpTestServer(bundle: string, env: Record<string, string> = {}): McpStdioServer {
  return { command: process.execPath, args: [bundle], env };
}
