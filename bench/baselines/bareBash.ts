// Baseline: the floor of a local runtime's start: spawn a bare bash (the
// runtime's flags, no prelude) and read its answer to one `echo`.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { within } from '../harness/measure.ts';

/** ms from the spawn to `ready` read back on stdout; the bash is killed afterwards, untimed. */
export async function bareBash(cwd: string, timeoutMs = 10_000): Promise<number> {
  const t0 = performance.now();
  const child = spawn('bash', ['--noprofile', '--norc'], { cwd, stdio: 'pipe' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await within(
      timeoutMs,
      'a bare bash',
      new Promise<void>((resolve, reject) => {
        let out = '';
        child.once('error', reject);
        child.once('exit', (code) => reject(new Error(`bash exited (${code}) before answering`)));
        child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()).includes('ready\n') && resolve());
        child.stdin.write('echo ready\n');
      }),
    );
    return performance.now() - t0;
  } finally {
    child.kill('SIGKILL');
    await exited;
  }
}
