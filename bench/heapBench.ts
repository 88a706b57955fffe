// What the memory measurements share: node child processes driven one command
// at a time over IPC (the heap rows' process, and the density step's server,
// baseline and client processes), and, for the measured side, heapUsed after
// full GCs and the resident set size. The bench itself runs under plain tsx;
// a measured process is started with --expose-gc.
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getHeapSpaceStatistics } from 'node:v8';
import pLimit from 'p-limit';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { CreateConversationBody, type PassivationReason } from '../protocol/index.ts';
import type { RuntimeProvider } from '../src/runtime/index.ts';
import { MemoryRuntime, echoHandler } from '../src/runtime/memoryRuntime.ts';
import type { NodeHost } from '../src/host/index.ts';
import type { NatsConnection } from '../src/store/index.ts';
import { createTether, type Tether, type TetherOptions } from '../src/tether.ts';
import { benchStores } from './benchStores.ts';
import type { HeapProtocol, HeapReport, HeapRequest } from './heapProcess.ts';
import { GC_NODE_FLAGS, REPO_ROOT, benchFile } from './benchFiles.ts';
import { within } from './measure.ts';

/** What a child process answers to: for each command, its arguments and its reply. */
export type Protocol = Record<string, { args: object; reply: unknown }>;

type Question = { type: string; args: object };
type Answer = { ok: true; value: unknown } | { ok: false; error: string };

/**
 * A bench file running in a node process of its own, asked one command at a
 * time; each answer comes back over IPC. A crash or exit rejects the pending question.
 */
export class BenchChild<P extends Protocol> {
  readonly #child: ChildProcess;
  readonly #name: string;
  #pending: { resolve: (answer: Answer) => void; reject: (err: Error) => void } | null = null;
  #exited: Error | null = null;

  constructor(file: URL, name: string, execArgv: readonly string[]) {
    this.#name = name;
    this.#child = fork(fileURLToPath(file), [], {
      execArgv: [...execArgv],
      // The repository root, so that `--import tsx` finds this checkout's tsx wherever the bench was started.
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    this.#child.on('message', (answer: Answer) => {
      const pending = this.#pending;
      this.#pending = null;
      pending?.resolve(answer);
    });
    this.#child.on('error', (err) => this.#gone(new Error(`${name}: ${err.message}`)));
    this.#child.on('exit', (code, signal) => this.#gone(new Error(`${name} exited (${signal ?? code})`)));
  }

  /** The child's reply to command `type`, or an error naming `step` after `timeoutMs`. */
  async ask<T extends keyof P & string>(
    type: T,
    args: P[T]['args'],
    timeoutMs: number,
    step = `${this.#name}: ${type}`,
  ): Promise<P[T]['reply']> {
    if (this.#exited) throw this.#exited;
    if (this.#pending) throw new Error(`${this.#name} is still busy (asked to ${type})`);
    const answer = new Promise<Answer>((resolve, reject) => {
      this.#pending = { resolve, reject };
      this.#child.send({ type, args } satisfies Question);
    });
    const reply = await within(timeoutMs, step, answer);
    if (!reply.ok) throw new Error(`${this.#name} failed to ${type}: ${reply.error}`);
    return reply.value;
  }

  stop(): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill();
  }

  #gone(err: Error): void {
    this.#exited ??= err;
    this.#pending?.reject(err);
    this.#pending = null;
  }
}

/** The child side of BenchChild: answers each command in turn with its handler; the parent going away ends the process. */
export function answerCommands<P extends Protocol>(handlers: {
  [T in keyof P]: (args: P[T]['args']) => Promise<P[T]['reply']>;
}): void {
  const run = async ({ type, args }: Question): Promise<unknown> => {
    const handler = handlers[type];
    if (!handler) throw new Error(`unknown command ${type}`);
    return handler(args);
  };
  let queue: Promise<unknown> = Promise.resolve();
  process.on('message', (question: Question) => {
    queue = queue.then(() =>
      run(question).then(
        (value) => process.send?.({ ok: true, value } satisfies Answer),
        (err: unknown) =>
          process.send?.({
            ok: false,
            error: err instanceof Error ? (err.stack ?? err.message) : String(err),
          } satisfies Answer),
      ),
    );
  });
  process.on('disconnect', () => process.exit(0));
}

/** Rows (e, e2): heapProcess.ts's measurement in a process of its own. */
export async function heapRun(request: HeapRequest, timeoutMs: number): Promise<HeapReport> {
  const child = new BenchChild<HeapProtocol>(benchFile('heapProcess'), 'the heap process', GC_NODE_FLAGS);
  try {
    return await child.ask('measure', request, timeoutMs, 'the heap measurement');
  } finally {
    child.stop();
  }
}

const gc = (globalThis as { gc?: () => void }).gc;

/** heapUsed in bytes once timers and pending I/O settled and full GCs stopped shrinking the heap (needs --expose-gc). */
export async function heapUsed(): Promise<number> {
  if (!gc) throw new Error('run with node --expose-gc');
  await new Promise((resolve) => setTimeout(resolve, 100));
  let used = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 5; i++) {
    gc();
    const now = process.memoryUsage().heapUsed;
    if (now >= used) break;
    used = now;
  }
  return used;
}

/** This process's resident set (VmRSS of /proc/self/status) in bytes; process.memoryUsage().rss where /proc is not there. */
export function rssBytes(): number {
  try {
    const line = readFileSync('/proc/self/status', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('VmRSS:'));
    const kib = line ? Number(/(\d+)/.exec(line)?.[1]) : Number.NaN;
    if (Number.isFinite(kib)) return kib * 1024;
  } catch {
    // Not Linux.
  }
  return process.memoryUsage().rss;
}

export interface MemoryReading {
  /** heapUsed after full GCs. */
  heapBytes: number;
  /** The part of it that is compiled code (V8's code spaces): it grows with what a run made hot, not per object kept. */
  codeBytes: number;
  rssBytes: number;
}

/** heapUsed after full GCs, then the RSS: one memory reading of this process. */
export async function memoryNow(): Promise<MemoryReading> {
  const heapBytes = await heapUsed();
  const codeBytes = getHeapSpaceStatistics()
    .filter((space) => space.space_name.startsWith('code_'))
    .reduce((total, space) => total + space.space_used_size, 0);
  return { heapBytes, codeBytes, rssBytes: rssBytes() };
}

/** Like memoryRuntimeProvider, but keeps no list of what it made: the bench must not hold sessions' runtimes. */
const untrackedRuntimes: RuntimeProvider = { create: (id, options) => new MemoryRuntime(id, echoHandler, options) };

export interface BenchTether {
  tether: Tether;
  /** Closes the Tether, then deletes its stream and buckets. */
  dispose: () => Promise<void>;
}

/**
 * A Tether as the memory measurements use it (not listening until asked): the
 * JetStream event log and KV conversation and snapshot stores on names of its
 * own (`name` and the run's tag), scripted agent, in-memory runtimes, default
 * limits, silent logger.
 */
export async function benchTether(
  nc: NatsConnection,
  name: string,
  tag: string,
  server?: TetherOptions['server'],
): Promise<BenchTether> {
  const { stores, dispose } = await benchStores(nc, name, tag);
  const tether = createTether({
    stores,
    runtimes: untrackedRuntimes,
    agent: scriptedAgent(),
    logger: silentLogger,
    server,
  });
  return {
    tether,
    dispose: async () => {
      await tether.close();
      await dispose();
    },
  };
}

/** The user of the i-th conversation: one user each, so the per-user running limit stays at its default. */
export const benchUser = (i: number) => `u${i}`;

const AT_ONCE = 200;

/**
 * Creates `count` conversations (user `benchUser(first + i)`), 200 at a time,
 * and waits until each has started (`awaiting_user_input`). Returns their ids.
 */
export async function createStarted(manager: NodeHost, count: number, first = 0): Promise<string[]> {
  const limit = pLimit(AT_ONCE);
  const body = CreateConversationBody.parse({});
  const ids = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      limit(async () => (await manager.commands.create(benchUser(first + i), body)).conversation_id),
    ),
  );
  // Start-up (runtime, then awaiting_user_input) runs after create returns.
  for (const [i, id] of ids.entries()) {
    while ((await manager.session(id, benchUser(first + i))).state !== 'awaiting_user_input')
      await new Promise((r) => setTimeout(r, 10));
  }
  return ids;
}

/** `manager.passivate(id, reason)` of every id, 200 at a time. */
export async function passivateAll(
  manager: NodeHost,
  ids: readonly string[],
  reason: PassivationReason,
): Promise<void> {
  const limit = pLimit(AT_ONCE);
  await Promise.all(ids.map((id) => limit(() => manager.passivate(id, reason))));
}
