import { spawn } from 'node:child_process';
import { symlink } from 'node:fs/promises';
import { connect, createServer, type Server } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { natsBinary } from '../support/natsBinary.ts';
import { createConversation, freePort, http } from '../support/serverProcess.ts';
import { until } from '../support/until.ts';

const BIN = join(resolve(dirname(fileURLToPath(import.meta.url)), '../..'), 'bin', 'tether.js');
const e2e = useE2e();

/** Runs `tether serve` until it exits by itself (bounded), with its exit code and stderr. */
async function serveUntilExit(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const dataDir = await e2e.tempDir();
  const child = spawn(process.execPath, [BIN, 'serve'], {
    env: { ...process.env, NATS_URL: '', TETHER_HOST: '127.0.0.1', TETHER_DATA_DIR: dataDir, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  const code = await new Promise<number | null>((done) => child.once('exit', done));
  clearTimeout(timer);
  return { code, stderr };
}

/** Whether something accepts a connection on the port (a connection is given up after 500 ms). */
function listening(port: number): Promise<boolean> {
  return new Promise<boolean>((done) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => done(true)).once('error', () => done(false));
    setTimeout(() => socket.destroy(), 500);
  });
}

const waitForPort = (port: number) =>
  until(() => listening(port), `something to listen on ${port}`, { timeoutMs: 5_000, everyMs: 50 });

describe('tether serve that cannot start', () => {
  it('says how to install nats-server when the binary is missing, and exits 1 (it installs nothing itself)', async () => {
    const { code, stderr } = await serveUntilExit({ TETHER_PORT: '0', NATS_SERVER_BIN: '/nonexistent/nats-server' });
    expect(code).toBe(1);
    expect(stderr).toContain('NATS_SERVER_BIN=/nonexistent/nats-server is not an executable file');
    expect(stderr).toContain('apt-get install nats-server');
  });

  it('exits 1 and frees its port when NATS_URL has no JetStream (a start that fails late undoes what it started)', async () => {
    const natsPort = await freePort();
    const plain = spawn(natsBinary(), ['-a', '127.0.0.1', '-p', String(natsPort)], { stdio: 'ignore' });
    try {
      await waitForPort(natsPort);
      const port = await freePort();
      const { code, stderr } = await serveUntilExit({
        TETHER_PORT: String(port),
        NATS_URL: `nats://127.0.0.1:${natsPort}`,
      });
      expect(code).toBe(1);
      expect(stderr).toMatch(/tether: .*jetstream/i);
      // The port is free again: nothing of the failed start is left listening.
      const probe = createServer();
      await new Promise<void>((done, fail) => probe.once('error', fail).listen(port, '127.0.0.1', done));
      probe.close();
    } finally {
      plain.kill('SIGKILL');
    }
  });

  it('stops when NATS refuses its password, naming the variable and the reason, never the password', async () => {
    const natsPort = await freePort();
    const password = 'pw-DO-NOT-LEAK-0c7d';
    const args = ['-a', '127.0.0.1', '-p', String(natsPort), '--user', 'tether', '--pass', password];
    const guarded = spawn(natsBinary(), args, { stdio: 'ignore' });
    try {
      await waitForPort(natsPort);
      const url = `nats://127.0.0.1:${natsPort}`;
      const wrong = { TETHER_PORT: '0', NATS_URL: url, NATS_USER: 'tether', NATS_PASSWORD: `${password}-x` };
      const { code, stderr } = await serveUntilExit(wrong);
      expect(code).toBe(1);
      expect(stderr).toMatch(/NATS refused NATS_USER\/NATS_PASSWORD\): Authorization Violation/);
      const inUrl = await serveUntilExit({ TETHER_PORT: '0', NATS_URL: url.replace('//', `//tether:${password}-x@`) });
      expect(inUrl.code).toBe(1);
      expect(inUrl.stderr).toContain(`nats://tether:***@127.0.0.1:${natsPort}`);
      expect(stderr + inUrl.stderr).not.toContain(password);
    } finally {
      guarded.kill('SIGKILL');
    }
  });

  it('names the port and the variable when its port is taken, and exits 1 before starting nats-server', async () => {
    const holder: Server = createServer();
    await new Promise<void>((done) => holder.listen(0, '127.0.0.1', done));
    const port = (holder.address() as { port: number }).port;
    try {
      const { code, stderr } = await serveUntilExit({ TETHER_PORT: String(port) });
      expect(code).toBe(1);
      expect(stderr).toContain(`listening on 127.0.0.1:${port} is in use (EADDRINUSE): set TETHER_PORT or TETHER_HOST`);
      expect(stderr).not.toContain('embedded nats-server started');
    } finally {
      holder.close();
    }
  });

  it('refuses TETHER_REPLICAS=3 with its own nats-server, and on a single NATS server, naming the variable', async () => {
    const embedded = await serveUntilExit({ TETHER_PORT: '0', TETHER_REPLICAS: '3' });
    expect(embedded.code).toBe(1);
    expect(embedded.stderr).toMatch(/TETHER_REPLICAS: 3 replicas need a NATS cluster .* NATS_URL/);
    expect(embedded.stderr).not.toContain('embedded nats-server started');

    const single = await serveUntilExit({ TETHER_PORT: '0', TETHER_REPLICAS: '3', NATS_URL: inject('natsUrl') });
    expect(single.code).toBe(1);
    expect(single.stderr).toMatch(/tether: TETHER_REPLICAS=3 \(at most the number of nats-servers .*\): .*replicas/);
    expect(single.stderr).toContain('non-clustered');
  });

  it('stops under TETHER_SANDBOX=bwrap where bwrap cannot run; under auto it warns and says sandbox none', async () => {
    // A PATH with a shell and git but no bwrap.
    const bin = await e2e.tempDir();
    for (const tool of ['bash', 'sh', 'git']) await symlink(join('/usr/bin', tool), join(bin, tool));
    const env = { PATH: bin, NATS_SERVER_BIN: natsBinary() };
    const strict = await serveUntilExit({ ...env, TETHER_PORT: '0', TETHER_SANDBOX: 'bwrap' });
    expect(strict.code).toBe(1);
    expect(strict.stderr).toContain('tether: TETHER_SANDBOX=bwrap, but bwrap cannot be run (spawn bwrap ENOENT)');

    const server = await e2e.start({ env });
    expect(server.stderr()).toContain('commands run without a sandbox (TETHER_SANDBOX=auto)');
    const id = await createConversation(server.baseUrl);
    const info = await http<{ sandbox: string }>(server.baseUrl, 'GET', `/api/conversations/${id}`);
    expect(info.body.sandbox).toBe('none');
  });
});

describe('tether serve whose stderr reader goes away', () => {
  it('drops its log lines and still stops on SIGTERM (a broken pipe does not make it spin on its own error)', async () => {
    const dataDir = await e2e.tempDir();
    const port = await freePort();
    const child = spawn(process.execPath, [BIN, 'serve'], {
      env: {
        ...process.env,
        NATS_URL: '',
        TETHER_HOST: '127.0.0.1',
        TETHER_PORT: String(port),
        TETHER_DATA_DIR: dataDir,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const exited = new Promise<number | null>((done) => child.once('exit', done));
    try {
      await waitForPort(port);
      // Up to 10 s for it to be healthy; it goes on either way, as it always did.
      await until(
        async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.ok,
        'healthz to answer',
        { timeoutMs: 10_000, everyMs: 100 },
      ).catch(() => undefined);
      child.stderr.destroy();
      // Every request that fails logs; the shutdown logs too.
      await fetch(`http://127.0.0.1:${port}/api/conversations/nope`).catch(() => null);
      child.kill('SIGTERM');
      const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 15_000))]);
      expect(code).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
