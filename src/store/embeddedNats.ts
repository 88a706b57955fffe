import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { mkdir, readFile, readdir } from 'node:fs/promises';
import { connect as tcpConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';

export interface EmbeddedNatsOptions {
  /** Listen on this port (default: a free one). A server started again after a crash reuses its port, so clients reconnect by themselves. */
  port?: number;
  /** JetStream data goes to `<dataDir>/nats`. */
  dataDir: string;
  /** Receives nats-server's log lines. */
  log?: (line: string) => void;
  /** nats-server binary: `locateNatsServer()` finds it (this never installs one). */
  binary: string;
  /** How long to wait for the server to accept connections (default 15 s). */
  startTimeoutMs?: number;
  /** More nats-server arguments, after the ones above (a test cluster's `--server_name`, `--cluster`, `--routes`). */
  extraArgs?: readonly string[];
}

export interface EmbeddedNatsExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when stop() asked for it; false when the server died on its own. */
  expected: boolean;
}

export interface EmbeddedNats {
  /** `nats://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** Process id of nats-server itself (not of its guard). */
  readonly pid: number;
  readonly storeDir: string;
  /** Stops the server gracefully (SIGTERM), then SIGKILL after a bound. Idempotent. */
  stop(): Promise<void>;
  /** Called once when the server has exited, whatever the reason. */
  onExit(callback: (exit: EmbeddedNatsExit) => void): void;
}

const STOP_GRACE_MS = 10_000;
const KILL_WAIT_MS = 3_000;

// The guard sits between node and nats-server. Its stdin is a pipe from node
// that is never written, so it reads end-of-file exactly when node closes it
// (stop()) or when node is gone, however it went: exit, crash or kill -9.
// A watcher then sends nats-server SIGTERM. The guard prints the server's pid,
// waits for it and exits with its status, so node learns when it dies.
// Background jobs of a non-interactive sh get /dev/null as stdin, hence fd 3.
const GUARD = `
exec 3<&0 </dev/null
"$@" 1>&2 3<&- &
srv=$!
echo "$srv"
{ while read -r _ <&3; do :; done; kill -TERM "$srv" 2>/dev/null; } &
watcher=$!
exec 3<&-
wait "$srv"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
`;

/**
 * Starts `nats-server -js` on a free loopback port with its store under
 * `<dataDir>/nats`, and resolves once it accepts connections. The server never
 * outlives this process: see GUARD. It does not keep node's event loop alive.
 */
export async function startEmbeddedNats(options: EmbeddedNatsOptions): Promise<EmbeddedNats> {
  const { binary } = options;
  const storeDir = join(options.dataDir, 'nats');
  await mkdir(storeDir, { recursive: true });
  const args = [
    '-js',
    '-a',
    '127.0.0.1',
    '-p',
    String(options.port ?? -1),
    '--store_dir',
    storeDir,
    '--ports_file_dir',
    storeDir,
    ...(options.extraArgs ?? []),
  ];
  const server = new GuardedServer(binary, args, options.log);
  const deadline = Date.now() + (options.startTimeoutMs ?? 15_000);
  try {
    const { pid, port } = await untilReady(server, storeDir, deadline);
    server.unref();
    return {
      url: `nats://127.0.0.1:${port}`,
      port,
      pid,
      storeDir,
      stop: () => server.stop(),
      onExit: (callback) => server.onExit(callback),
    };
  } catch (err) {
    await server.stop();
    const reason = err instanceof Error ? err.message : String(err);
    const log = server.recent.length ? `\n${server.recent.join('\n')}` : '';
    throw new Error(`embedded nats-server did not start: ${reason}${log}`, { cause: err });
  }
}

/** nats-server under its guard: the process, its exit, its recent log lines. */
class GuardedServer {
  readonly recent: string[] = [];
  /** The guard's first line: the server's pid. */
  readonly firstLine: Promise<string>;
  readonly exited: Promise<EmbeddedNatsExit>;
  readonly #child: ChildProcessByStdio<Writable, Readable, Readable>;
  readonly #callbacks: Array<(exit: EmbeddedNatsExit) => void> = [];
  #exit: EmbeddedNatsExit | undefined;
  #expected = false;
  #stopping: Promise<void> | undefined;

  constructor(binary: string, args: string[], log: ((line: string) => void) | undefined) {
    // detached: a terminal's Ctrl-C reaches node only, which stops the server last.
    this.#child = spawn('/bin/sh', ['-c', GUARD, 'tether-nats-guard', binary, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    // Closing stdin is how stop() speaks to the guard; a guard already gone must not crash node.
    this.#child.stdin.on('error', () => {});
    createInterface({ input: this.#child.stderr }).on('line', (line) => {
      this.recent.push(line);
      if (this.recent.length > 20) this.recent.shift();
      log?.(line);
    });
    this.firstLine = new Promise((resolve) => createInterface({ input: this.#child.stdout }).once('line', resolve));
    this.exited = new Promise((resolve, reject) => {
      this.#child.once('error', reject);
      this.#child.once('exit', (code, signal) => {
        const exit = { code, signal, expected: this.#expected };
        this.#exit = exit;
        resolve(exit);
        for (const callback of this.#callbacks.splice(0)) callback(exit);
      });
    });
    this.exited.catch(() => {});
  }

  get running(): boolean {
    return this.#exit === undefined;
  }

  onExit(callback: (exit: EmbeddedNatsExit) => void): void {
    const exit = this.#exit;
    if (exit) queueMicrotask(() => callback(exit));
    else this.#callbacks.push(callback);
  }

  stop(): Promise<void> {
    this.#stopping ??= (async () => {
      if (this.#exit) return;
      this.#expected = true;
      this.#child.stdin.end();
      if (await settlesWithin(this.exited, STOP_GRACE_MS)) return;
      // The guard leads its own process group (detached): this reaches it, the watcher and the server.
      if (this.#child.pid !== undefined) killQuietly(-this.#child.pid, 'SIGKILL');
      await settlesWithin(this.exited, KILL_WAIT_MS);
    })();
    return this.#stopping;
  }

  unref(): void {
    const child = this.#child;
    for (const handle of [child, child.stdin, child.stdout, child.stderr]) (handle as { unref?: () => void }).unref?.();
  }
}

/** Waits for the server's pid, its port, and a client greeting; throws with the reason otherwise. */
async function untilReady(
  server: GuardedServer,
  storeDir: string,
  deadline: number,
): Promise<{ pid: number; port: number }> {
  const exitReason = server.exited.then(describeExit);
  const pidLine = await beforeDeadline(Promise.race([server.firstLine, exitReason]), deadline);
  const pid = Number(pidLine);
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error(pidLine ?? 'timed out');
  const live = () => server.running && Date.now() < deadline;
  const port = await Promise.race([waitForPort(storeDir, pid, live), exitReason]);
  if (typeof port !== 'number') throw new Error(port ?? 'no ports file appeared in time');
  const accepts = await Promise.race([acceptsClients(port, live), exitReason]);
  if (accepts !== true) throw new Error(accepts || 'the port did not answer in time');
  return { pid, port };
}

function describeExit(exit: EmbeddedNatsExit): string {
  return `nats-server exited (${exit.signal ?? `code ${exit.code}`})`;
}

/** Resolves with the promise's value, or undefined once the deadline passes. */
async function beforeDeadline<T>(promise: Promise<T>, deadline: number): Promise<T | undefined> {
  const timer = new AbortController();
  const late = sleep(Math.max(0, deadline - Date.now()), undefined, { signal: timer.signal }).catch(() => undefined);
  try {
    return await Promise.race([promise, late]);
  } finally {
    timer.abort();
  }
}

async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const settled = promise.then(
    () => true,
    () => true,
  );
  return (await beforeDeadline(settled, Date.now() + ms)) ?? false;
}

/** nats-server writes `<binary>_<pid>.ports` once it listens; it is keyed by pid, so stale files do not match. */
async function waitForPort(dir: string, pid: number, live: () => boolean): Promise<number | undefined> {
  const suffix = `_${pid}.ports`;
  while (live()) {
    const name = (await readdir(dir)).find((entry) => entry.endsWith(suffix));
    if (name) {
      try {
        const ports = JSON.parse(await readFile(join(dir, name), 'utf8')) as { nats?: string[] };
        const port = Number(new URL(ports.nats?.[0] ?? '').port);
        if (port > 0) return port;
      } catch {
        // Read while being written: try again.
      }
    }
    await sleep(20);
  }
  return undefined;
}

/** True once a TCP client on the port gets the server's INFO greeting. */
async function acceptsClients(port: number, live: () => boolean): Promise<boolean> {
  while (live()) {
    if (await greets(port)) return true;
    await sleep(20);
  }
  return false;
}

function greets(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket: Socket = tcpConnect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once('error', () => done(false));
    socket.once('data', (chunk) => done(chunk.toString('latin1').startsWith('INFO ')));
  });
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}
