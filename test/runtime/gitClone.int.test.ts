import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { CloneError, cloneRepository, TOKEN_VARIABLE, type CloneOptions } from '../../src/runtime/gitClone.ts';
import { MAIN_FILES, startGitRemote, type GitRemote } from '../support/gitRemote.ts';
import { runningInGroup, type Proc } from '../support/processes.ts';

const TOKEN = `tok-${randomBytes(12).toString('hex')}`;
const CREDENTIALS = `Basic ${Buffer.from(`x-access-token:${TOKEN}`).toString('base64')}`;
const MODULE = fileURLToPath(new URL('../../src/runtime/gitClone.ts', import.meta.url));

let root: string;
let remote: GitRemote;
/** Accepts connections and never answers: a clone from it hangs until it is stopped. */
let stalled: Server;
let stalledUrl: string;
const held = new Set<Socket>();
let workspaces = 0;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-clone-'));
  remote = await startGitRemote({ token: TOKEN, root: join(root, 'remote') });
  stalled = createServer((socket) => held.add(socket.on('error', () => {})));
  await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', resolve));
  stalledUrl = `http://127.0.0.1:${(stalled.address() as AddressInfo).port}/repo.git`;
});

afterAll(async () => {
  await remote?.close();
  for (const socket of held) socket.destroy();
  await new Promise((resolve) => stalled?.close(resolve));
  await rm(root, { recursive: true, force: true });
});

function killGroup(pgrp: number): void {
  try {
    process.kill(-pgrp, 'SIGKILL');
  } catch {
    // ESRCH: the group is already gone.
  }
}

/** A fresh workspace path (not created). */
function workspace(): string {
  return join(root, `workspace-${++workspaces}`);
}

function clone(options: Partial<CloneOptions> = {}) {
  return cloneRepository({ url: remote.url, token: TOKEN, dir: workspace(), timeoutMs: 20_000, ...options });
}

/** The CloneError the clone rejects with; checks that the token is not in it. */
async function failed(clone: Promise<unknown>): Promise<CloneError> {
  const error: unknown = await clone.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(error).toBeInstanceOf(CloneError);
  const { reason, message } = error as CloneError;
  expect(`${reason} ${message}`).not.toContain(TOKEN);
  return error as CloneError;
}

/** Every file under `dir`, .git/ included. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((path) => join(dir, path))
    .filter((path) => statSync(path).isFile());
}

/** `process.env` with a user git config (GIT_CONFIG_GLOBAL) of `text`. */
function userConfig(text: string): NodeJS.ProcessEnv {
  const path = join(root, `gitconfig-${++workspaces}`);
  writeFileSync(path, text);
  return { ...process.env, GIT_CONFIG_GLOBAL: path };
}

function closedPort(): Promise<number> {
  const server = createServer();
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    }),
  );
}

/** An `onSpawn` hook, and the pid it is given: the clone spawns git after preparing the workspace. */
function spawned(): { onSpawn: (pid: number) => void; pgrp: Promise<number> } {
  let onSpawn: (pid: number) => void = () => {};
  const pgrp = new Promise<number>((resolve) => (onSpawn = resolve));
  return { onSpawn, pgrp };
}

/** Resolves with the group's processes once git's HTTP helper is among them (it has connected). */
function connected(pgrp: number): Promise<Proc[]> {
  return expect
    .poll(() => runningInGroup(pgrp), { timeout: 5_000, interval: 20 })
    .toEqual(expect.arrayContaining([expect.objectContaining({ comm: 'git-remote-http' })]))
    .then(() => runningInGroup(pgrp));
}

describe('cloneRepository', () => {
  it('clones the default branch with the token, given to git as x-access-token, and leaves no process behind', async () => {
    let pgrp = 0;
    const dir = workspace();
    const result = await clone({ dir, onSpawn: (pid) => (pgrp = pid) });
    expect(result).toEqual({ commit: remote.heads.main, branch: 'main' });
    expect(result.commit).toMatch(/^[0-9a-f]{40}$/);
    for (const [path, text] of Object.entries(MAIN_FILES)) expect(readFileSync(join(dir, path), 'utf8')).toBe(text);
    expect(remote.authorized).toContain(CREDENTIALS);
    await expect.poll(() => runningInGroup(pgrp), { timeout: 2_000, interval: 20 }).toEqual([]);
  });

  it('checks out the branch asked for', async () => {
    const dir = workspace();
    await expect(clone({ dir, branch: 'feature' })).resolves.toEqual({
      commit: remote.heads.feature,
      branch: 'feature',
    });
    expect(readFileSync(join(dir, 'FEATURE.txt'), 'utf8')).toBe('feature branch\n');
  });

  it('leaves the token in no file of the workspace, .git/ included, nor in a credential helper of the git config', async () => {
    const dir = workspace();
    const stored = join(root, 'stored-credentials');
    await clone({ dir, env: userConfig(`[credential]\n\thelper = store --file=${stored}\n`) });
    expect(existsSync(stored)).toBe(false);
    const files = filesUnder(dir);
    expect(files).toContain(join(dir, '.git', 'config'));
    for (const path of files) {
      const content = readFileSync(path, 'latin1');
      expect(content, path).not.toContain(TOKEN);
      expect(content, path).not.toContain(CREDENTIALS.slice('Basic '.length));
    }
    expect(readFileSync(join(dir, '.git', 'config'), 'utf8')).toContain(`url = ${remote.url}\n`);
  });

  it('is refused without a token, failing at once instead of asking anyone for one', async () => {
    const refusals = remote.refusals;
    // Each of these would answer with the token, were it asked.
    const answering = join(root, 'answering-askpass.sh');
    writeFileSync(answering, `#!/bin/sh\necho ${TOKEN}\n`, { mode: 0o700 });
    const env = { ...userConfig(`[core]\n\taskPass = ${answering}\n`), GIT_ASKPASS: answering, SSH_ASKPASS: answering };
    const error = await failed(clone({ token: undefined, env }));
    expect(error.code).toBe('CLONE_FAILED');
    expect(error.reason).toMatch(/authentication/i);
    expect(remote.refusals).toBeGreaterThan(refusals);
  });

  it('is refused with a wrong token', async () => {
    const wrong = `wrong-${TOKEN}`;
    const error = await failed(clone({ token: wrong }));
    expect(error.code).toBe('CLONE_FAILED');
    expect(error.reason).toMatch(/authentication failed/i);
    expect(error.reason).not.toContain(wrong);
    expect(remote.authorized).toContain(`Basic ${Buffer.from(`x-access-token:${wrong}`).toString('base64')}`);
  });

  it('names a branch the remote does not have', async () => {
    const error = await failed(clone({ branch: 'nope' }));
    expect(error.reason).toMatch(/Remote branch nope not found/);
  });

  it('says when the remote cannot be reached', async () => {
    const port = await closedPort();
    const error = await failed(clone({ url: `http://127.0.0.1:${port}/repo.git` }));
    expect(error.code).toBe('CLONE_FAILED');
    expect(error.reason).toContain(`127.0.0.1:${port}`);
  });

  it('refuses a local path: the host would copy any repository it can read', async () => {
    const error = await failed(clone({ url: join(root, 'remote', 'repo.git') }));
    expect(error.reason).toMatch(/transport 'file' not allowed/);
  });

  it("does not use the server's own credentials: its .netrc and git configuration are not read", async () => {
    const home = workspace();
    mkdirSync(home, { recursive: true });
    const port = new URL(remote.url).port;
    writeFileSync(join(home, '.netrc'), `machine 127.0.0.1 port ${port} login x password ${TOKEN}\n`);
    writeFileSync(join(home, '.gitconfig'), `[http]\n\textraHeader = Authorization: Basic ${btoa(`x:${TOKEN}`)}\n`);
    const error = await failed(clone({ token: undefined, env: { ...process.env, HOME: home } }));
    expect(error.reason).toMatch(/authentication required/);
  });

  it('clones a file:// URL (taken only where the server allows it)', async () => {
    const url = `file://${join(root, 'remote', 'repo.git')}`;
    await expect(clone({ url })).resolves.toEqual({ commit: remote.heads.main, branch: 'main' });
  });

  it('empties a folder that holds an interrupted clone, keeping the folder itself', async () => {
    const dir = workspace();
    mkdirSync(join(dir, '.git', 'objects'), { recursive: true });
    writeFileSync(join(dir, '.git', 'HEAD'), 'garbage\n');
    writeFileSync(join(dir, 'README.md'), 'half written');
    writeFileSync(join(dir, 'LEFTOVER.txt'), 'from before');
    const inode = statSync(dir).ino;
    await expect(clone({ dir })).resolves.toEqual({ commit: remote.heads.main, branch: 'main' });
    expect(statSync(dir).ino).toBe(inode);
    expect(readdirSync(dir).sort()).toEqual(['.git', '.openhands', 'AGENTS.md', 'README.md']);
  });

  it('hands the token to git in its environment only, and is cancelled by its signal', async () => {
    const controller = new AbortController();
    const { onSpawn, pgrp: spawning } = spawned();
    const cloning = failed(clone({ url: stalledUrl, signal: controller.signal, onSpawn }));
    const pgrp = await spawning;
    const group = await connected(pgrp);
    const git = group.find((p) => p.comm === 'git');
    const environ = readFileSync(`/proc/${git?.pid}/environ`, 'utf8').split('\0');
    expect(environ).toContain(`${TOKEN_VARIABLE}=${TOKEN}`);
    for (const p of group) expect(readFileSync(`/proc/${p.pid}/cmdline`, 'utf8')).not.toContain(TOKEN);
    const askpass = environ.find((entry) => entry.startsWith('GIT_ASKPASS='))?.slice('GIT_ASKPASS='.length);
    expect(readFileSync(askpass ?? '', 'utf8')).not.toContain(TOKEN);
    controller.abort();
    const error = await cloning;
    expect([error.code, error.reason]).toEqual(['CLONE_CANCELLED', 'the clone was cancelled']);
    // Killed with the group (SIGKILL): a helper may take a moment to finish exiting.
    await expect.poll(() => runningInGroup(pgrp), { timeout: 2_000, interval: 20 }).toEqual([]);
  });

  it('kills the whole clone when it takes longer than timeoutMs', async () => {
    let pgrp = 0;
    const started = performance.now();
    const error = await failed(clone({ url: stalledUrl, timeoutMs: 300, onSpawn: (pid) => (pgrp = pid) }));
    expect([error.code, error.reason]).toEqual(['CLONE_TIMED_OUT', 'the clone timed out after 300 ms']);
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(pgrp).toBeGreaterThan(0);
    await expect.poll(() => runningInGroup(pgrp), { timeout: 2_000, interval: 20 }).toEqual([]);
  });

  it('dies with the server process, even by SIGKILL', async () => {
    const script = [
      `import { cloneRepository } from ${JSON.stringify(MODULE)};`,
      `cloneRepository({ url: ${JSON.stringify(stalledUrl)}, dir: ${JSON.stringify(workspace())}, timeoutMs: 60_000,`,
      `  onSpawn: (pid) => process.stdout.write(pid + '\\n') }).catch(() => {});`,
    ].join('\n');
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    onTestFinished(() => void child.kill('SIGKILL'));
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`the child exited early with ${code}`)));
    });
    const pgrp = Number(line);
    onTestFinished(() => killGroup(pgrp)); // in case the test failed with the clone still running
    await connected(pgrp);
    child.kill('SIGKILL');
    await expect.poll(() => runningInGroup(pgrp), { timeout: 3_000, interval: 20 }).toEqual([]);
  });
});
