import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, onTestFinished, test } from 'vitest';
import { natsBinary } from '../support/natsBinary.ts';
import { startEmbeddedNats, type EmbeddedNatsExit } from '../../src/store/embeddedNats.ts';
import { connectNats } from '../../src/store/natsConnection.ts';

const CHILD = fileURLToPath(new URL('../support/embeddedNatsChild.ts', import.meta.url));

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tether-embedded-'));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A zombie (exited, not yet reaped) counts as gone: it runs nothing and holds no port. */
async function isRunning(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  return !/^\d+ \(.*\) Z/.test(stat);
}

async function goneWithin(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!(await isRunning(pid))) return true;
    await sleep(50);
  }
  return !(await isRunning(pid));
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone, as it should be.
  }
}

describe('startEmbeddedNats', () => {
  test('starts a JetStream server that accepts connections, and stop() ends its process', async () => {
    const nats = await startEmbeddedNats({ dataDir: await tempDir(), binary: natsBinary() });
    const exits: EmbeddedNatsExit[] = [];
    nats.onExit((exit) => exits.push(exit));
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);
    const nc = await connectNats(nats.url, { name: 'embedded-test' });
    const account = await (await jetstreamManager(nc)).getAccountInfo();
    expect(account.streams).toBe(0);
    await nc.close();
    expect(await isRunning(nats.pid)).toBe(true);
    await nats.stop();
    expect(await isRunning(nats.pid)).toBe(false);
    // After a graceful SIGTERM shutdown nats-server 2.9.10 exits with 0 or 1 (a race in
    // its main), so only the cause is asserted.
    expect(exits).toEqual([expect.objectContaining({ signal: null, expected: true })]);
  });

  test('a server that cannot start is reported with its reason instead of a port', async () => {
    const start = startEmbeddedNats({ dataDir: await tempDir(), binary: '/bin/false', startTimeoutMs: 5_000 });
    await expect(start).rejects.toThrow(/did not start: nats-server exited \(code 1\)/);
  });

  test('a server that dies on its own is reported through onExit as unexpected', async () => {
    const nats = await startEmbeddedNats({ dataDir: await tempDir(), binary: natsBinary() });
    const exited = new Promise<EmbeddedNatsExit>((resolve) => nats.onExit(resolve));
    process.kill(nats.pid, 'SIGKILL');
    expect(await exited).toMatchObject({ expected: false });
    expect(await isRunning(nats.pid)).toBe(false);
    await nats.stop();
  });

  test.each([
    ['is killed with SIGKILL', 'idle', 'SIGKILL'],
    ['is terminated with SIGTERM', 'idle', 'SIGTERM'],
    ['is interrupted with SIGINT', 'idle', 'SIGINT'],
    ['crashes with an uncaught error', 'crash', undefined],
  ] as const)('the server goes away when the node process that started it %s', async (_, mode, signal) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, await tempDir(), mode], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    let pid: number | undefined = undefined;
    onTestFinished(({ task }) => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      // The test failed with the server still running: do not leave it behind.
      if (task.result?.state === 'fail' && pid !== undefined) killQuietly(pid);
    });
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`child exited early with ${code}: ${stderr}`)));
    });
    ({ pid } = JSON.parse(line) as { pid: number; url: string });
    expect(await isRunning(pid)).toBe(true);
    if (signal) child.kill(signal);
    expect(await goneWithin(pid, 5_000)).toBe(true);
  });
});
