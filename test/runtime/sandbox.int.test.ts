import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { localRuntimeProvider, type LocalRuntime } from '../../src/runtime/index.ts';
import { probeBwrap, type SandboxOptions } from '../../src/runtime/sandbox.ts';
import { runningInGroup } from '../support/processes.ts';

// What a command in a bwrap sandbox can and cannot reach (docs/security.md, "The sandbox").

const CHILD = fileURLToPath(new URL('../support/localRuntimeChild.ts', import.meta.url));
/** The server's own files: this checkout. */
const CHECKOUT = fileURLToPath(new URL('../..', import.meta.url));

let root: string;
let dataDir: string;
let workspaceRoot: string;
const runtimes: LocalRuntime[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-sandbox-'));
  // Laid out as a server's data folder: the store beside the workspaces.
  dataDir = join(root, 'data');
  workspaceRoot = join(dataDir, 'workspaces');
  await mkdir(join(dataDir, 'nats'), { recursive: true });
  await writeFile(join(dataDir, 'nats', 'store.dat'), 'stored events');
});

afterAll(async () => {
  await Promise.all(runtimes.map((runtime) => runtime.stop()));
  await rm(root, { recursive: true, force: true });
});

async function sandboxed(id: string, sandbox: SandboxOptions = { network: true }): Promise<LocalRuntime> {
  const baseEnv = { ...process.env, TETHER_DATA_DIR: dataDir, TETHER_SECRETS_KEY: 'k'.repeat(32), NATS_URL: 'n' };
  const runtime = localRuntimeProvider({ workspaceRoot, baseEnv, sandbox }).create(id, {
    env: { API_KEY: 'the-conversations-own' },
  }) as LocalRuntime;
  runtimes.push(runtime);
  await runtime.start();
  return runtime;
}

async function output(runtime: LocalRuntime, command: string): Promise<string> {
  return (await runtime.run(command)).output;
}

describe('a command in a bwrap sandbox', () => {
  it('can run here (bwrap installed, user namespaces allowed)', async () => {
    await expect(probeBwrap({ network: true })).resolves.toBeNull();
  });

  it('sees its workspace and none of the data folder, other workspaces or the server files', async () => {
    const other = await sandboxed('conv-other');
    await other.run('echo private > mine.txt');
    const runtime = await sandboxed('conv-1');
    expect(await output(runtime, 'pwd; echo hi > own.txt && cat own.txt')).toBe(`${runtime.workspace}\nhi\n`);
    for (const path of [join(dataDir, 'nats'), join(other.workspace, 'mine.txt'), join(CHECKOUT, 'package.json')]) {
      const result = await runtime.run(`ls ${path}; cat ${path}`);
      expect(result.exit_code, path).not.toBe(0);
      expect(result.output, path).toContain('No such file or directory');
    }
    // Only its own workspace is under the root.
    expect(await output(runtime, `ls ${workspaceRoot}`)).toBe('conv-1\n');
    expect(await output(runtime, `ls ${CHECKOUT} 2>&1 | head -1`)).toContain('No such file or directory');
  });

  it('sees no TETHER_ or NATS_ variable in any process and no process of the server', async () => {
    const runtime = await sandboxed('conv-env');
    const environments = await output(runtime, "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | cut -d= -f1 | sort -u");
    expect(environments).toContain('API_KEY');
    expect(environments.split('\n').filter((name) => /^(TETHER|NATS)_/.test(name))).toEqual([]);
    // Its own pid namespace: bwrap's init and the shell, nothing of the server.
    const names = (await output(runtime, 'cat /proc/[0-9]*/comm')).trim().split('\n');
    expect(new Set(names)).toEqual(new Set(['bwrap', 'bash']));
    // The shell alone: the lifeline's watcher runs outside, out of a command's reach.
    expect(names.filter((name) => name === 'bash')).toHaveLength(1);
  });

  it('keeps the secrets from bwrap: a secret PATH cannot choose the bwrap that runs outside the sandbox', async () => {
    const planter = await sandboxed('conv-planter');
    const marker = join(root, 'planted-bwrap-ran');
    await planter.run(`printf '#!/bin/sh\\ntouch ${marker}\\nexec /usr/bin/bwrap "$@"\\n' > bwrap && chmod +x bwrap`);
    const runtime = localRuntimeProvider({ workspaceRoot, sandbox: { network: true } }).create('conv-victim', {
      env: { PATH: `${planter.workspace}:/usr/bin:/bin`, API_KEY: 'the-conversations-own' },
    }) as LocalRuntime;
    runtimes.push(runtime);
    await runtime.start();
    expect(existsSync(marker)).toBe(false);
    // The shell has them; bwrap's init (visible inside) does not.
    expect(await output(runtime, 'echo "$PATH $API_KEY"')).toBe(
      `${planter.workspace}:/usr/bin:/bin the-conversations-own\n`,
    );
    expect(await output(runtime, "tr '\\0' '\\n' < /proc/1/environ | grep -c the-conversations-own")).toBe('0\n');
  });

  it('cannot write outside its workspace and /tmp, and its /tmp is its own', async () => {
    const runtime = await sandboxed('conv-write');
    const neighbour = await sandboxed('conv-neighbour');
    for (const path of ['/etc/tether-probe', '/usr/tether-probe', '/tether-probe']) {
      const result = await runtime.run(`touch ${path}`);
      expect(result.exit_code, path).not.toBe(0);
      expect(result.output, path).toContain('Read-only file system');
    }
    // The workspace's folder is under /tmp here: what is written beside it stays in the sandbox's own /tmp.
    await runtime.run(`touch ${join(workspaceRoot, 'probe')}`);
    expect(existsSync(join(workspaceRoot, 'probe'))).toBe(false);
    const marker = `tether-sandbox-${process.pid}-${Date.now()}`;
    expect(await output(runtime, `echo x > /tmp/${marker} && echo ok; echo y > kept && echo ok`)).toBe('ok\nok\n');
    expect(existsSync(join('/tmp', marker))).toBe(false);
    expect(await output(neighbour, `ls /tmp/${marker} 2>&1`)).toContain('No such file or directory');
  });

  it('reaches a local port with the network on, and not with TETHER_SANDBOX_NETWORK=none', async () => {
    const server = await listening();
    const port = (server.address() as { port: number }).port;
    const connect = `(exec 5<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo connected || echo refused`;
    expect(await output(await sandboxed('conv-net'), connect)).toBe('connected\n');
    expect(await output(await sandboxed('conv-no-net', { network: false }), connect)).toBe('refused\n');
    server.close();
  });

  it('leaves no sandboxed process behind when its server is killed with SIGKILL', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, workspaceRoot, '0', 'bwrap'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    onTestFinished(() => void child.kill('SIGKILL'));
    const pgid = Number(await firstLine(child));
    await expect
      .poll(() => runningInGroup(pgid).map((p) => p.comm), { timeout: 5_000 })
      .toEqual(expect.arrayContaining(['bash', 'sleep']));
    child.kill('SIGKILL');
    await expect.poll(() => runningInGroup(pgid), { timeout: 2_000, interval: 50 }).toEqual([]);
  });
});

function listening(): Promise<Server> {
  const server = createServer((socket) => socket.end());
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function firstLine(child: ReturnType<typeof spawn>): Promise<string> {
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`child exited early with ${code}: ${stderr}`)));
  });
}
