// `node bin/tether.js ...` as a user would run it, for the CLI's tests.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const TETHER_BIN = fileURLToPath(new URL('../../bin/tether.js', import.meta.url));

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `node bin/tether.js ...args` with only the given NATS_ and TETHER_ variables set; resolves once it exits. */
export function runTether(args: string[], env: Record<string, string>): Promise<CliRun> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^(NATS_|TETHER_)/.test(key)));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [TETHER_BIN, ...args], {
      env: { ...base, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}
