// Host two: `tether serve` nodes (as `npm start` runs them) on a 3-node NATS cluster on loopback,
// one workspaces folder; one token per user, the user being the token (pass it as `rest`'s user and a
// ClientSpec's). Every node and nats-server is tracked: timed() reports their CPU and RSS.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { connectNats } from '../../src/store/index.ts';
import { startNatsCluster } from '../../test/support/natsCluster.ts';
import { freePort } from '../../test/support/serverProcess.ts';
import { track, untrack, until } from './measure.ts';
import { REPO_ROOT, repoFile } from './proc.ts';

const MAIN = repoFile('src/cli/main');
const FLAGS = MAIN.endsWith('.ts') ? ['--import', 'tsx'] : [];
const running = new Set<ChildProcess>();
process.once('exit', () => running.forEach((c) => c.kill('SIGKILL')));

/** One `tether serve`; start() again is a restart (same id, port and data dir). */
export class TetherNode {
  /** Its log lines (JSON) and when they came (wall clock, ms). */
  readonly log: Array<{ at: number; text: string }> = [];
  readonly base: string;
  readonly ws: string;
  #child: ChildProcess | null = null;
  #exited = Promise.resolve();

  constructor(
    readonly name: string,
    port: number,
    private readonly env: Record<string, string>,
  ) {
    [this.base, this.ws] = [`http://127.0.0.1:${port}`, `ws://127.0.0.1:${port}`];
    this.env = { ...env, TETHER_NODE_ID: name, TETHER_HOST: '127.0.0.1', TETHER_PORT: `${port}` };
  }

  /** Starts the node; resolves once `GET /healthz` answers 200 (joined the cluster, listening). */
  async start(): Promise<void> {
    // Only what the cluster says configures the node, whatever the bench's environment holds.
    const own = Object.entries(process.env).filter(([k]) => !k.startsWith('TETHER_') && k !== 'NATS_URL');
    const child = spawn(process.execPath, [...FLAGS, fileURLToPath(MAIN), 'serve'], {
      cwd: REPO_ROOT,
      env: { ...Object.fromEntries(own), ...this.env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    [this.#child, this.#exited] = [child, new Promise<void>((r) => child.once('exit', () => r()))];
    running.add(child);
    track(this.name, child.pid ?? 0);
    void this.#exited.then(() => running.delete(child) && this.#child === child && (this.#child = null));
    createInterface({ input: child.stderr }).on('line', (text) => this.log.push({ at: Date.now(), text }));
    const healthy = async () => {
      if (!this.#child) throw new Error(`${this.name} exited; its log ends ${JSON.stringify(this.log.slice(-8))}`);
      const res = await fetch(`${this.base}/healthz`, { signal: AbortSignal.timeout(2_000) }).catch(() => null);
      await res?.body?.cancel();
      return res?.status === 200 ? true : undefined;
    };
    await until(`${this.name} healthy`, healthy, 45_000, 100);
  }

  /** kill -9; resolves once it exited. */
  async kill(): Promise<void> {
    untrack(this.name);
    this.#child?.kill('SIGKILL');
    await this.#exited;
  }
}

export type TetherCluster = Awaited<ReturnType<typeof startCluster>>;

/**
 * The NATS cluster, then node-a (it makes the streams and buckets), then the
 * other nodes at once (`env` besides NATS_URL, TETHER_WORKSPACES_DIR and
 * TETHER_TOKENS), and the bench's own connection to NATS (`nc`); tokens
 * `<label>-<i>`. `stop` kills the nodes (nothing to keep: no drains that hand
 * conversations around), stops NATS, removes the folders.
 */
export async function startCluster(o: { label: string; users: number; env: Record<string, string>; nodes?: number }) {
  const undo: Array<() => Promise<unknown>> = [];
  const stop = async () => {
    for (const step of undo.splice(0).reverse()) await step().catch(() => undefined);
  };
  const dir = async (what: string) => {
    const d = await mkdtemp(join(tmpdir(), `tether-bench-${o.label}-${what}-`));
    undo.push(() => rm(d, { recursive: true, force: true }));
    return d;
  };
  try {
    const nats = await startNatsCluster();
    nats.servers.forEach((s) => track(`nats ${s.name}`, s.pid));
    undo.push(() => nats.stop().finally(() => nats.servers.forEach((s) => untrack(`nats ${s.name}`))));
    const workspaces = await dir('ws');
    const tokens = Array.from({ length: o.users }, (_, i) => `${o.label}-${i}`);
    const pairs = tokens.map((t) => `${t}:${t}`).join(',');
    const env = { ...o.env, NATS_URL: nats.url, TETHER_WORKSPACES_DIR: workspaces, TETHER_TOKENS: pairs };
    const nodes: TetherNode[] = [];
    for (const name of Array.from({ length: o.nodes ?? 3 }, (_, i) => `node-${'abcdefgh'[i]}`))
      nodes.push(new TetherNode(name, await freePort(), { ...env, TETHER_DATA_DIR: await dir(name) }));
    undo.push(() => Promise.all(nodes.map((n) => n.kill())));
    await nodes[0]!.start();
    await Promise.all(nodes.slice(1).map((n) => n.start()));
    const nc = await connectNats(nats.url, { name: `tether-bench-${o.label}` });
    undo.push(() => nc.close());
    return { nats, nodes, tokens, workspaces, nc, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
