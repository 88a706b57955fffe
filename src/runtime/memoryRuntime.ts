import { RuntimeDeadError } from './errors.ts';
import type { CommandResult, RunOptions, Runtime, RuntimeExit, RuntimeOptions, RuntimeProvider } from './runtime.ts';

export type CommandHandler = (command: string, env: Record<string, string>) => CommandResult | Promise<CommandResult>;

/** Answers `echo X` with X and anything else with exit code 0 and no output. */
export const echoHandler: CommandHandler = (command) => {
  const echo = /^echo (.*)$/.exec(command);
  return { exit_code: 0, output: echo ? `${echo[1]}\n` : '', timed_out: false, truncated: false };
};

/**
 * The in-memory twin of a runtime: no process, commands answered by a
 * handler. For tests and benchmarks of everything above the runtime.
 */
export class MemoryRuntime implements Runtime {
  readonly conversationId: string;
  readonly workspace: string;
  readonly #handler: CommandHandler;
  readonly #env: Record<string, string>;
  readonly #listeners = new Set<(exit: RuntimeExit) => void>();
  #alive = false;
  #stopped = false;
  #rejectRunning: ((err: Error) => void) | null = null;

  readonly #startDelayMs: number;

  constructor(
    conversationId: string,
    handler: CommandHandler,
    options: RuntimeOptions & { startDelayMs?: number } = {},
  ) {
    this.conversationId = conversationId;
    this.workspace = `memory:${conversationId}`;
    this.#handler = handler;
    this.#env = options.env ?? {};
    this.#startDelayMs = options.startDelayMs ?? 0;
  }

  get alive(): boolean {
    return this.#alive;
  }

  async start(): Promise<void> {
    if (this.#startDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.#startDelayMs));
    if (this.#stopped) throw new RuntimeDeadError('this runtime was stopped');
    this.#alive = true;
  }

  async run(command: string, _options?: RunOptions): Promise<CommandResult> {
    if (!this.#alive) throw new RuntimeDeadError('the runtime is not running');
    return new Promise<CommandResult>((resolve, reject) => {
      this.#rejectRunning = reject;
      Promise.resolve(this.#handler(command, this.#env))
        .then(resolve, reject)
        .finally(() => {
          this.#rejectRunning = null;
        });
    });
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#alive = false;
  }

  /** Simulates the runtime dying by itself. */
  kill(): void {
    if (!this.#alive) return;
    this.#alive = false;
    this.#rejectRunning?.(new RuntimeDeadError('the runtime died'));
    for (const listener of this.#listeners) listener({ code: null, signal: 'SIGKILL' });
  }

  onExit(listener: (exit: RuntimeExit) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}

export interface MemoryRuntimeProvider extends RuntimeProvider {
  /** Every runtime created so far, newest last. */
  readonly created: MemoryRuntime[];
}

/** `startDelayMs`: how long each runtime takes to start (Infinity-like values: it never does in practice). */
export function memoryRuntimeProvider(
  handler: CommandHandler = echoHandler,
  options: { startDelayMs?: number } = {},
): MemoryRuntimeProvider {
  const created: MemoryRuntime[] = [];
  return {
    created,
    create(conversationId, runtimeOptions) {
      const runtime = new MemoryRuntime(conversationId, handler, { ...runtimeOptions, ...options });
      created.push(runtime);
      return runtime;
    },
  };
}
