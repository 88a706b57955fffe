import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { localRuntimeProvider, type LocalRuntime } from '../../src/runtime/index.ts';
import { runningInGroup } from '../support/processes.ts';

const CHILD = fileURLToPath(new URL('../support/localRuntimeChild.ts', import.meta.url));
const HEARTBEAT_TIMEOUT_MS = 400;

let root: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-heartbeat-'));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function killGroup(pgrp: number): void {
  try {
    process.kill(-pgrp, 'SIGKILL');
  } catch {
    // ESRCH: the group is already gone.
  }
}

describe('LocalRuntime with heartbeatTimeoutMs', () => {
  it('lets a command run past the heartbeat timeout while the server lives', async () => {
    const provider = localRuntimeProvider({ workspaceRoot: root, heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS });
    const runtime = provider.create('conv-1') as LocalRuntime;
    onTestFinished(() => runtime.stop());
    await runtime.start();
    await expect(runtime.run('sleep 1.2; echo done')).resolves.toEqual({
      exit_code: 0,
      output: 'done\n',
      timed_out: false,
      truncated: false,
    });
    expect(runtime.alive).toBe(true);
  });

  it.each(['plain', 'bwrap'])(
    'kills the %s shell and its command when the server freezes (SIGSTOP) with its end of fd 3 still open',
    async (sandbox) => {
      const child = spawn(process.execPath, ['--import', 'tsx', CHILD, root, String(HEARTBEAT_TIMEOUT_MS), sandbox], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      onTestFinished(() => void child.kill('SIGKILL'));
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`child exited early with ${code}: ${stderr}`)));
      });
      const pgrp = Number(line); // the shell's process group: the shell leads it, or in a sandbox bwrap's init
      onTestFinished(() => killGroup(pgrp)); // in case the test failed with the command still running
      await expect
        .poll(() => runningInGroup(pgrp).map((p) => p.comm), { timeout: 5_000 })
        .toEqual(expect.arrayContaining(['bash', 'sleep']));
      expect(runningInGroup(pgrp).map((p) => p.pid)).toContain(pgrp);

      child.kill('SIGSTOP');
      await expect.poll(() => runningInGroup(pgrp), { timeout: 1_000, interval: 50 }).toEqual([]);
    },
  );
});
