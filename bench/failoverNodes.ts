// The cluster benches' Tether nodes (see tetherCluster.ts): `tether serve`
// processes (compiled, as `npm start` runs them, or through tsx), each a child
// of the bench that keeps its JSON log lines, so that the bench can split a
// takeover into its phases.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { NODE_FLAGS, REPO_ROOT, serverEntry } from './benchFiles.ts';

const READY_TIMEOUT_MS = 45_000;
const STOP_TIMEOUT_MS = 20_000;

/** One line of a node's log: when (wall clock, ms), what, and its fields. */
export interface LogLine {
  at: number;
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}

export interface TetherNodeSpec {
  /** TETHER_NODE_ID, kept across restarts. */
  name: string;
  port: number;
  dataDir: string;
  /** Everything else the node reads (NATS_URL, TETHER_LEASE_MS, ...). */
  env: Record<string, string>;
}

type Child = ChildProcessByStdio<null, null, Readable>;

// The bench exits with process.exit, whatever happened: no node outlives it.
const running = new Set<Child>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** One `tether serve` process; restart() starts the same node again (same id, port and data dir). */
export class TetherNode {
  readonly spec: TetherNodeSpec;
  /** Every log line of every process this node has been, in order. */
  readonly log: LogLine[] = [];
  #child: Child | null = null;
  #exited: Promise<void> = Promise.resolve();

  private constructor(spec: TetherNodeSpec) {
    this.spec = spec;
  }

  /** Starts the node and resolves once `GET /healthz` answers 200 (joined the cluster, listening). */
  static async start(spec: TetherNodeSpec): Promise<TetherNode> {
    const node = new TetherNode(spec);
    await node.restart();
    return node;
  }

  get name(): string {
    return this.spec.name;
  }

  get base(): string {
    return `http://127.0.0.1:${this.spec.port}`;
  }

  get wsBase(): string {
    return `ws://127.0.0.1:${this.spec.port}`;
  }

  get pid(): number {
    const pid = this.#child?.pid;
    if (pid === undefined) throw new Error(`${this.name} is not running`);
    return pid;
  }

  /** The node's log lines with this message, from `since` (ms, wall clock) on. */
  lines(msg: string, since: number): LogLine[] {
    return this.log.filter((line) => line.msg === msg && line.at >= since);
  }

  /** Its warnings and errors (and lines that were not JSON), as text, for a failure's message. */
  problems(): string[] {
    return this.log
      .filter((l) => l.level !== 'info' && l.level !== 'debug')
      .map((l) => `${this.name} ${new Date(l.at).toISOString()} ${l.level} ${l.msg} ${JSON.stringify(l.fields)}`);
  }

  async restart(): Promise<void> {
    if (this.#child) throw new Error(`${this.name} is running`);
    const env: NodeJS.ProcessEnv = { ...process.env };
    // Only what the spec says configures the node, whatever the bench's own environment holds.
    for (const key of Object.keys(env)) if (key.startsWith('TETHER_') || key === 'NATS_URL') delete env[key];
    Object.assign(env, this.spec.env, {
      TETHER_NODE_ID: this.spec.name,
      TETHER_HOST: '127.0.0.1',
      TETHER_PORT: String(this.spec.port),
      TETHER_DATA_DIR: this.spec.dataDir,
    });
    const child = spawn(process.execPath, [...NODE_FLAGS, fileURLToPath(serverEntry()), 'serve'], {
      cwd: REPO_ROOT,
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    running.add(child);
    this.#child = child;
    this.#exited = new Promise((resolve) =>
      child.once('exit', () => {
        running.delete(child);
        if (this.#child === child) this.#child = null;
        resolve();
      }),
    );
    createInterface({ input: child.stderr }).on('line', (text) => this.#keep(text));
    await this.#untilHealthy();
  }

  /** kill -9, and waits for the exit. */
  async kill(): Promise<void> {
    process.kill(this.pid, 'SIGKILL');
    await this.#exited;
  }

  /** SIGTERM (a drain), SIGKILL after a bound. Idempotent. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    await this.#exited;
    clearTimeout(timer);
  }

  #keep(text: string): void {
    try {
      const { ts, level, msg, ...fields } = JSON.parse(text) as { ts: string; level: string; msg: string } & Record<
        string,
        unknown
      >;
      this.log.push({ at: Date.parse(ts), level, msg, fields });
    } catch {
      this.log.push({ at: Date.now(), level: 'text', msg: text, fields: {} });
    }
  }

  async #untilHealthy(): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (!this.#child) break;
      try {
        const res = await fetch(`${this.base}/healthz`, { signal: AbortSignal.timeout(2_000) });
        await res.body?.cancel();
        if (res.status === 200) return;
      } catch {
        // Not listening yet.
      }
      await sleep(100);
    }
    const tail = this.log
      .slice(-15)
      .map((l) => `${l.msg} ${JSON.stringify(l.fields)}`)
      .join('\n');
    if (this.#child) await this.kill();
    throw new Error(`tether node ${this.name} did not become healthy on port ${this.spec.port}; its log:\n${tail}`);
  }
}
