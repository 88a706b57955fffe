import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { processState } from '../../src/runtime/shellProcess.ts';
import { buildMcpTestProgram } from '../support/mcpTestPrograms.ts';

const HEARTBEAT_MS = 400;

let root: string;
let workspace: string;
let server: string;
let hubChild: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-mcp-lifeline-'));
  workspace = join(root, 'ws');
  await mkdir(workspace);
  [server, hubChild] = await Promise.all([buildMcpTestProgram('server', root), buildMcpTestProgram('hubChild', root)]);
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

function gone(pid: number): boolean {
  const state = processState(pid);
  return state === undefined || state === 'Z';
}

/** Starts a node process that opens the test MCP server; gives it and the pids of the server and of a sleep in its group. */
async function serverParent(heartbeatMs: number) {
  const child = spawn(process.execPath, [hubChild, workspace, server, String(heartbeatMs)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  onTestFinished(() => void child.kill('SIGKILL'));
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`the child exited early with ${code}: ${stderr}`)));
  });
  const [pid, sleeper] = line.split(' ').map(Number) as [number, number];
  onTestFinished(() => {
    for (const p of [pid, sleeper]) if (!gone(p)) process.kill(p, 'SIGKILL');
  });
  expect([gone(pid), gone(sleeper)]).toEqual([false, false]);
  return { child, pid, sleeper };
}

describe('an MCP stdio server', () => {
  it('dies with its whole group when the process that started it is SIGKILLed', async () => {
    const { child, pid, sleeper } = await serverParent(0);
    child.kill('SIGKILL');
    await expect.poll(() => [gone(pid), gone(sleeper)], { timeout: 2_000, interval: 50 }).toEqual([true, true]);
  });

  it('dies with its whole group when the process that started it freezes (SIGSTOP) and sends no heartbeat', async () => {
    const { child, pid, sleeper } = await serverParent(HEARTBEAT_MS);
    child.kill('SIGSTOP');
    await expect.poll(() => [gone(pid), gone(sleeper)], { timeout: 2_000, interval: 50 }).toEqual([true, true]);
  });
});
