// `npm run cluster` (scripts/cluster.js): three nats-servers and three Tether nodes on one machine.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { freePort, http } from '../support/serverProcess.ts';
import { until } from '../support/until.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = join(ROOT, 'scripts', 'cluster.js');
const TOKEN = 'cluster-script-token-0123456789';
/** What a printed base64 secrets key would look like (32 bytes). */
const BASE64_KEY = /[A-Za-z0-9+/]{43}=/;

interface ClusterRun {
  child: ChildProcessByStdio<null, Readable, Readable>;
  /** Everything it printed so far, stdout and stderr. */
  output(): string;
  exited: Promise<number | null>;
}

const e2e = useE2e();

/** `node scripts/cluster.js` on a temp data dir, with only the given Tether variables set. */
async function runCluster(env: Record<string, string>): Promise<ClusterRun & { dataDir: string }> {
  const dataDir = await e2e.tempDir();
  const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^(NATS_URL|TETHER_)/.test(key)));
  const child = spawn(process.execPath, [SCRIPT], {
    cwd: ROOT,
    env: { ...base, TETHER_DATA_DIR: dataDir, TETHER_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  for (const stream of [child.stdout, child.stderr]) stream.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  // Before its data dir is removed.
  e2e.onCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    for (const proc of processesMentioning(dataDir)) process.kill(proc.pid, 'SIGKILL');
  });
  return { child, output: () => text, exited, dataDir };
}

/** A base port with the next two free as well. */
async function threeFreePorts(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const base = await freePort();
    if (base > 65_533) continue;
    const held: Server[] = [];
    const ok = await Promise.all(
      [base + 1, base + 2].map(
        (port) =>
          new Promise<boolean>((done) => {
            const probe = createServer();
            probe.once('error', () => done(false));
            probe.listen(port, '127.0.0.1', () => done(held.push(probe) > 0));
          }),
      ),
    );
    await Promise.all(held.map((s) => new Promise((done) => s.close(done))));
    if (ok.every(Boolean)) return base;
  }
  throw new Error('no three consecutive free ports');
}

interface Proc {
  pid: number;
  state: string;
  cmdline: string;
}

/** Live processes whose command line or environment names `text` (a zombie has exited: it is left out). */
function processesMentioning(text: string): Proc[] {
  const found: Proc[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? '?';
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const environ = readFileSync(`/proc/${entry}/environ`, 'utf8');
      if (state !== 'Z' && state !== 'X' && (cmdline.includes(text) || environ.includes(text)))
        found.push({ pid: Number(entry), state, cmdline });
    } catch {
      // Gone while we looked, or not ours to read.
    }
  }
  return found;
}

/** Whether the process runs (a zombie has exited, it only waits to be reaped). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !['Z', 'X'].includes(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return false;
  }
}

/** The node URLs the script printed once ready: `node-<n>  http://...  ws://...`. */
function printedNodes(output: string): Array<{ name: string; url: string; ws: string }> {
  return [...output.matchAll(/^cluster \| +(node-\d) +(http:\/\/\S+) +(ws:\/\/\S+)/gm)].map((m) => ({
    name: m[1]!,
    url: m[2]!,
    ws: m[3]!,
  }));
}

/** Waits for the script to print its three nodes; fails when it exits first. */
async function untilReady(run: ClusterRun): Promise<void> {
  await until(() => printedNodes(run.output()).length === 3 || run.child.exitCode !== null, 'the node URLs', {
    timeoutMs: 25_000,
  });
  expect(run.child.exitCode, run.output()).toBeNull();
}

describe('npm run cluster', () => {
  /** The run the SIGKILL case kills: started with the file, so that it gets ready while the other cases run. */
  let toKill: ClusterRun & { dataDir: string };
  beforeAll(async () => {
    toKill = await runCluster({ TETHER_PORT: String(await threeFreePorts()) });
  });

  it('runs three nodes on a three-server NATS cluster, serves one conversation through any node, and stops every process on SIGTERM', async () => {
    const port = await threeFreePorts();
    const run = await runCluster({ TETHER_PORT: String(port), TETHER_TOKENS: `${TOKEN}:alice` });
    await untilReady(run);

    const nodes = printedNodes(run.output());
    expect(nodes).toEqual(
      [1, 2, 3].map((n) => ({
        name: `node-${n}`,
        url: `http://127.0.0.1:${port + n - 1}`,
        ws: `ws://127.0.0.1:${port + n - 1}/ws`,
      })),
    );
    for (const node of nodes) expect((await http(node.url, 'GET', '/healthz')).status, node.name).toBe(200);
    // A key was made and kept for later runs (on a shared NATS, secrets need one: 400 SECRETS_NEED_KEY otherwise), and not shown.
    expect(run.output()).toMatch(
      /TETHER_SECRETS_KEY is not set: generated one kept in .*secrets-key \(readable by you only/,
    );
    expect(run.output()).not.toMatch(BASE64_KEY);
    const keyFile = join(run.dataDir, 'cluster', 'secrets-key');
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    expect((await readFile(keyFile, 'utf8')).trim()).toMatch(BASE64_KEY);

    const created = await http<{ conversation_id: string }>(
      nodes[0]!.url,
      'POST',
      '/api/conversations',
      { secrets: { API_KEY: 'value-1234' } },
      TOKEN,
    );
    expect(created.status, created.text).toBe(201);
    const id = created.body.conversation_id;
    const read = await http<{ conversation_id: string; user: string }>(
      nodes[2]!.url,
      'GET',
      `/api/conversations/${id}`,
      undefined,
      TOKEN,
    );
    expect(read.status, read.text).toBe(200);
    expect(read.body).toMatchObject({ conversation_id: id, user: 'alice' });

    // Every process it started names the data dir (nats-servers in their arguments, nodes in their environment).
    const started = processesMentioning(run.dataDir).filter((p) => p.pid !== run.child.pid);
    const natsServers = started.filter((p) => /^\S*nats-server /.test(p.cmdline)).map((p) => p.pid);
    const tetherNodes = started.filter((p) => /^\S*node bin\/tether\.js serve/.test(p.cmdline)).map((p) => p.pid);
    expect(natsServers).toHaveLength(3);
    expect(tetherNodes).toHaveLength(3);

    run.child.kill('SIGTERM');
    // When each one went: the nodes drain while NATS is still there, so every node is gone before any nats-server.
    const goneAt = new Map<number, number>();
    let done = false;
    void run.exited.then(() => (done = true));
    // By poll round, not by clock: two processes seen gone in the same round went in an order no one can tell.
    for (let round = 0; !done; round++) {
      for (const pid of [...natsServers, ...tetherNodes]) if (!goneAt.has(pid) && !isAlive(pid)) goneAt.set(pid, round);
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(await run.exited, run.output()).toBe(0);
    const lastNode = Math.max(...tetherNodes.map((pid) => goneAt.get(pid) ?? Infinity));
    const firstNats = Math.min(...natsServers.map((pid) => goneAt.get(pid) ?? Infinity));
    // Seen in the same 1 ms poll at worst: a nats-server stops a few ms after the last node.
    expect(lastNode, 'the last node went no later than the first nats-server').toBeLessThanOrEqual(firstNats);
    // A node whose NATS goes away while it drains says so (warn); the run logs at warn, so nothing else shows.
    expect(run.output()).not.toMatch(/^node-\d \| .*"level":"(warn|error)"/m);
    expect(processesMentioning(run.dataDir), run.output()).toEqual([]);
  });

  it('refuses to start when one of the three node ports is taken, naming it, and starts nothing', async () => {
    const port = await threeFreePorts();
    const taken = createServer();
    await new Promise<void>((done) => taken.listen(port + 2, '127.0.0.1', done));
    e2e.onCleanup(() => new Promise<void>((done) => taken.close(() => done())));
    const run = await runCluster({ TETHER_PORT: String(port) });

    expect(await run.exited).toBe(1);
    expect(run.output()).toContain(`port ${port + 2} on 127.0.0.1 is in use`);
    expect(run.output()).not.toMatch(/nats-servers starting/);
    expect(processesMentioning(run.dataDir)).toEqual([]);
  });

  it('stops everything and exits non-zero when a node dies while the cluster starts', async () => {
    const port = await threeFreePorts();
    // Each node refuses this key at start (its configuration is checked before it serves).
    const run = await runCluster({ TETHER_PORT: String(port), TETHER_SECRETS_KEY: 'not-a-key' });

    expect(await run.exited, run.output()).toBe(1);
    expect(run.output()).toMatch(/node-\d exited with code 1 while the cluster started/);
    expect(run.output()).toMatch(/TETHER_SECRETS_KEY/);
    expect(run.output()).not.toMatch(/ready in/);
    expect(processesMentioning(run.dataDir)).toEqual([]);
  });

  it('leaves no process behind when the script itself is killed with SIGKILL', async () => {
    const run = toKill;
    await untilReady(run);
    const started = processesMentioning(run.dataDir).filter((p) => p.pid !== run.child.pid);
    expect(started.filter((p) => /^\S*(nats-server|node bin\/tether\.js serve) /.test(p.cmdline))).toHaveLength(6);

    run.child.kill('SIGKILL');
    await run.exited;
    // Each child's guard reads end-of-file from the dead script and stops it (a node bounds its own stop at 10 s).
    await until(() => processesMentioning(run.dataDir).length === 0, 'every process it started to end', {
      timeoutMs: 20_000,
    });
  }, 45_000);
});
