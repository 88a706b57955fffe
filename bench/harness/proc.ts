// The one way the bench runs code in another process: a node child that
// imports a bench module and calls one of its exported functions, by name,
// with structured-clone arguments, and answers over IPC. The host (Tether),
// the client fleet and the baselines' servers are all such processes; their
// state lives in the called module's scope. Run as a child with `proc`.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { within } from './measure.ts';

const COMPILED = import.meta.url.endsWith('.js');
/** The repository root: children start there, so `--import tsx` finds this checkout's tsx. */
export const REPO_ROOT = fileURLToPath(new URL(COMPILED ? '../../..' : '../..', import.meta.url));
/** A file of the repository, compiled or not (`src/cli/main` → dist-bench/src/cli/main.js). */
export const repoFile = (path: string) => new URL(`../../${path}.${COMPILED ? 'js' : 'ts'}`, import.meta.url).href;
const NODE_FLAGS = COMPILED ? [] : ['--import', 'tsx'];
export const CALL_TIMEOUT_MS = 120_000;

type Call = { id: number; module: string; fn: string; args: unknown[] } | { exit: true };
type Answer = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };

const everyProc = new Set<Proc>();
process.once('exit', () => everyProc.forEach((p) => p.kill()));

export interface ProcOptions {
  /** `--expose-gc`, for a process whose heap is measured. */
  gc?: boolean;
  /** Writes a V8 CPU profile (`--cpu-prof`, 200 µs sampling) into this folder when the process stops. */
  cpuProfDir?: string;
}

export class Proc {
  readonly name: string;
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, { resolve: (a: Answer) => void; reject: (e: Error) => void }>();
  #next = 0;
  #gone: Error | null = null;
  readonly exited: Promise<void>;

  constructor(name: string, options: ProcOptions = {}) {
    this.name = name;
    const prof = options.cpuProfDir
      ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProfDir}`, '--cpu-prof-interval=200']
      : [];
    this.#child = fork(fileURLToPath(import.meta.url), ['proc'], {
      execArgv: [...NODE_FLAGS, ...(options.gc ? ['--expose-gc'] : []), ...prof],
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    everyProc.add(this);
    this.#child.on('message', (a: Answer) => {
      this.#pending.get(a.id)?.resolve(a);
      this.#pending.delete(a.id);
    });
    this.exited = new Promise((resolve) =>
      this.#child.once('exit', (code, signal) => {
        everyProc.delete(this);
        this.#gone = new Error(`${name} exited (${signal ?? code})`);
        for (const p of this.#pending.values()) p.reject(this.#gone);
        this.#pending.clear();
        resolve();
      }),
    );
  }

  get pid(): number {
    return this.#child.pid ?? 0;
  }

  /** `fn` (an export of `module`, named by itself) called in the child; its answer. */
  async call<A extends unknown[], R>(
    module: string,
    fn: (...args: A) => R,
    args: A,
    timeoutMs = CALL_TIMEOUT_MS,
  ): Promise<Awaited<R>> {
    if (this.#gone) throw this.#gone;
    const id = this.#next++;
    const answer = new Promise<Answer>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#child.send({ id, module, fn: fn.name, args } satisfies Call);
    });
    const a = await within(timeoutMs, `${this.name}: ${fn.name}`, answer);
    if (!a.ok) throw new Error(`${this.name}: ${fn.name} failed: ${a.error}`);
    return a.value as Awaited<R>;
  }

  /** Asks the child to exit (so that its CPU profile is written); kills it after 10 s. */
  async stop(): Promise<void> {
    if (this.#gone) return;
    this.#child.send({ exit: true } satisfies Call);
    const timer = setTimeout(() => this.kill(), 10_000);
    await this.exited;
    clearTimeout(timer);
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill(signal);
  }
}

// The child side: calls run concurrently, each answered when it settles.
if (process.argv[2] === 'proc' && process.send) {
  process.on('message', (call: Call) => {
    if ('exit' in call) process.exit(0);
    void (async () => {
      const mod = (await import(call.module)) as Record<string, (...args: unknown[]) => unknown>;
      const fn = mod[call.fn];
      if (typeof fn !== 'function') throw new Error(`${call.module} exports no function ${call.fn}`);
      return fn(...call.args);
    })().then(
      (value) => process.send?.({ id: call.id, ok: true, value } satisfies Answer),
      (err: unknown) =>
        process.send?.({
          id: call.id,
          ok: false,
          error: err instanceof Error ? (err.stack ?? err.message) : String(err),
        }),
    );
  });
  process.on('disconnect', () => process.exit(0));
}
