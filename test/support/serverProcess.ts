import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LoggedEvent } from '../../protocol/index.ts';
import { SERVER_WAIT, until } from './until.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = join(ROOT, 'bin', 'tether.js');
const READY_TIMEOUT_MS = 45_000;
const STOP_TIMEOUT_MS = 20_000;
const STDERR_KEEP_CHARS = 64_000;
const START_ATTEMPTS = 3;

export interface ServerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface StartServerOptions {
  /** Extra environment for the server (TETHER_PORT, TETHER_HOST and TETHER_DATA_DIR are set here; NATS_URL only from here). */
  env?: Record<string, string>;
  /**
   * The data directory to use. When given, the caller owns it and it is kept on stop
   * (a restart test starts a second server on it); otherwise a fresh temp dir is made and removed.
   */
  dataDir?: string;
  /** Listen on this port (default: a free one, and another on a clash). */
  port?: number;
}

export interface ServerProcess {
  readonly baseUrl: string;
  readonly wsUrl: string;
  readonly port: number;
  readonly dataDir: string;
  readonly pid: number;
  /** Resolves when the process has exited, however it ended. */
  readonly exited: Promise<ServerExit>;
  /** What the server wrote to stderr so far (the tail, when it is long). */
  stderr(): string;
  /** SIGTERM, wait for exit (SIGKILL after a bound), remove the temp dir if this helper made it. Idempotent. */
  stop(): Promise<ServerExit>;
  /** Sends a signal and returns at once; await `exited` to see it end. */
  kill(signal: NodeJS.Signals): void;
}

const running = new Set<ChildProcess>();
// Last resort when a worker dies without its afterAll: no server outlives the test run.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** A port the OS says is free right now. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.unref();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => (port ? resolvePort(port) : reject(new Error('no port from the OS'))));
    });
  });
}

/** A fresh temporary directory for a server's data. */
export function makeDataDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'tether-e2e-'));
}

/**
 * Spawns `node bin/tether.js serve` on a free loopback port with its own
 * nats-server, and resolves once `GET /healthz` answers 200. Retries on a
 * port taken between the probe and the listen.
 */
export async function startServer(options: StartServerOptions = {}): Promise<ServerProcess> {
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await makeDataDir());
  let lastError: unknown;
  for (let attempt = 1; attempt <= START_ATTEMPTS; attempt++) {
    try {
      return await startOnce(dataDir, ownsDataDir, options.env ?? {}, options.port);
    } catch (err) {
      lastError = err;
      if (!(err instanceof PortInUseError) || options.port !== undefined) break;
    }
  }
  if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
  throw lastError;
}

class PortInUseError extends Error {
  override name = 'PortInUseError';
}

async function startOnce(
  dataDir: string,
  ownsDataDir: boolean,
  extraEnv: Record<string, string>,
  fixedPort: number | undefined,
): Promise<ServerProcess> {
  const port = fixedPort ?? (await freePort());
  // Its own nats-server unless the test names one (NATS_URL in `env`), whatever this process has.
  const env: NodeJS.ProcessEnv = { ...process.env, TETHER_LOG_LEVEL: 'warn' };
  delete env.NATS_URL;
  Object.assign(env, extraEnv, { TETHER_PORT: String(port), TETHER_HOST: '127.0.0.1', TETHER_DATA_DIR: dataDir });
  const child = spawn(process.execPath, [BIN, 'serve'], { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(child);
  let stderrText = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    stderrText = (stderrText + chunk).slice(-STDERR_KEEP_CHARS);
  });
  const exited = new Promise<ServerExit>((resolveExit) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      resolveExit({ code, signal });
    });
  });
  const baseUrl = `http://127.0.0.1:${port}`;

  let stopping: Promise<ServerExit> | null = null;
  const stop = (): Promise<ServerExit> => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      const exit = await exited;
      clearTimeout(timer);
      if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
      return exit;
    })();
    return stopping;
  };

  const ready = await waitUntilHealthy(baseUrl, exited);
  if (ready !== 'ready') {
    if (ready === 'timeout') child.kill('SIGKILL');
    await exited;
    const text = stderrText;
    if (/EADDRINUSE|is in use/.test(text)) throw new PortInUseError(`port ${port} was taken: ${text}`);
    throw new Error(`tether did not become healthy on port ${port} (${ready}); stderr:\n${text}`);
  }

  return {
    baseUrl,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    port,
    dataDir,
    pid: child.pid!,
    exited,
    stderr: () => stderrText,
    stop,
    kill: (signal) => {
      child.kill(signal);
    },
  };
}

async function waitUntilHealthy(baseUrl: string, exited: Promise<ServerExit>): Promise<'ready' | 'exited' | 'timeout'> {
  let hasExited = false;
  void exited.then(() => (hasExited = true));
  const healthy = async () => {
    const res = await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.status === 200 && !hasExited;
  };
  // A request that fails: not listening yet.
  return until(async () => (hasExited ? 'exited' : (await healthy()) && 'ready'), `${baseUrl}/healthz`, {
    timeoutMs: READY_TIMEOUT_MS,
    everyMs: 100,
    retryErrors: true,
  }).catch(() => 'timeout' as const);
}

export interface HttpResult<T = unknown> {
  status: number;
  contentType: string | null;
  body: T;
  text: string;
}

/** One HTTP call with a JSON (or raw string) body; the answer's body is parsed when it is JSON. */
export async function http<T = unknown>(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
  token?: string,
): Promise<HttpResult<T>> {
  const init: RequestInit = { method, signal: AbortSignal.timeout(15_000) };
  const headers: Record<string, string> = {};
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    headers['content-type'] = 'application/json';
  }
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  init.headers = headers;
  const res = await fetch(`${baseUrl}${path}`, init);
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, contentType: res.headers.get('content-type'), body: parsed as T, text };
}

/** Creates a conversation and returns its id; fails loudly on anything but 201. */
export async function createConversation(baseUrl: string, body: Record<string, unknown> = {}): Promise<string> {
  const res = await http<{ conversation_id: string }>(baseUrl, 'POST', '/api/conversations', body);
  if (res.status !== 201) throw new Error(`POST /api/conversations answered ${res.status}: ${res.text}`);
  return res.body.conversation_id;
}

/** Every stored event of a conversation over REST, following has_more page by page, each checked against LoggedEvent. */
export async function allEvents(baseUrl: string, conversationId: string, pageSize = 1000): Promise<LoggedEvent[]> {
  const items: LoggedEvent[] = [];
  let after = 0;
  for (;;) {
    const res = await http<{ items: unknown[]; has_more: boolean }>(
      baseUrl,
      'GET',
      `/api/conversations/${conversationId}/events?after_seq=${after}&limit=${pageSize}`,
    );
    if (res.status !== 200) throw new Error(`GET events answered ${res.status}: ${res.text}`);
    // Validated, but kept as received: key order matters to a check that the bytes match the ws frames.
    const page = res.body.items.map((item) => {
      LoggedEvent.parse(item);
      return item as LoggedEvent;
    });
    items.push(...page);
    if (!res.body.has_more) return items;
    if (page.length === 0) throw new Error('has_more with an empty page');
    after = page[page.length - 1]!.seq;
  }
}

/** Posts a user message to the conversation through `server`'s REST API; anything but 202 throws. */
export async function postMessage(
  server: { baseUrl: string },
  conversationId: string,
  content: string,
  token?: string,
): Promise<void> {
  const action = { action: { type: 'message', content } };
  const res = await http(server.baseUrl, 'POST', `/api/conversations/${conversationId}/actions`, action, token);
  if (res.status !== 202) throw new Error(`posting a message to ${conversationId}: ${res.status} ${res.text}`);
}

/** The stored events once `test` holds for them (the events endpoint reads the log; it loads no session). */
export function eventsWhen(
  server: { baseUrl: string },
  conversationId: string,
  what: string,
  test: (events: LoggedEvent[]) => boolean,
  timeoutMs = 60_000,
): Promise<LoggedEvent[]> {
  return until(
    async () => {
      const events = await allEvents(server.baseUrl, conversationId);
      return test(events) && events;
    },
    what,
    { ...SERVER_WAIT, timeoutMs },
  );
}

/** `until` at SERVER_WAIT's pace, for the callers not moved to `until` yet (test/store/natsCluster.cluster.test.ts). */
export function eventually<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs = 30_000): Promise<T> {
  return until(probe, what, { ...SERVER_WAIT, timeoutMs });
}
