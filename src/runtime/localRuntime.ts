import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { RuntimeDeadError } from './errors.ts';
import { heartbeat, lifeline } from './lifeline.ts';
import { OutputCapture, SHELL_PRELUDE } from './outputCapture.ts';
import type { CommandResult, RunOptions, Runtime, RuntimeExit } from './runtime.ts';
import {
  SANDBOX_INFO_FD,
  sandboxEnv,
  sandboxPids,
  sandboxExit,
  sandboxedArgv,
  exportLines,
  type SandboxOptions,
} from './sandbox.ts';
import {
  ended,
  exitOf,
  killAll,
  lastPid,
  notRun,
  processState,
  reapStragglers,
  signalGroup,
  signalPid,
} from './shellProcess.ts';

export interface LocalRuntimeConfig {
  workspace: string;
  /** The shells' environment, without the conversation's secrets. */
  env: Record<string, string>;
  /**
   * The conversation's secrets, for the shell: in its environment, or in a sandbox
   * exported by the shell itself, so that bwrap (which runs outside) never sees them.
   */
  secrets?: Record<string, string>;
  shell: string;
  commandTimeoutMs: number;
  outputCapBytes: number;
  interruptGraceMs: number;
  /** See `LocalRuntimeProviderOptions.heartbeatTimeoutMs`. */
  heartbeatTimeoutMs?: number;
  /** Set: the shell runs in a bubblewrap sandbox (see `sandbox.ts`); unset: a plain shell of this user. */
  sandbox?: SandboxOptions;
}

const START_TIMEOUT_MS = 10_000;
const LIVENESS_MS = 250;

const MAX_TIMER_MS = 2 ** 31 - 1; // setTimeout fires at once beyond this
const RESTART_NOTE =
  '\n[tether] the command did not stop when interrupted; the shell was restarted ' +
  '(working directory and variables are reset)\n';

type State = 'new' | 'starting' | 'alive' | 'dead' | 'stopped';

interface Job {
  command: string;
  timeoutMs: number;
  resolve: (result: CommandResult) => void;
  reject: (error: Error) => void;
  detach: () => void;
}

interface Running {
  job: Job;
  capture: OutputCapture;
  timer?: NodeJS.Timeout;
  grace?: NodeJS.Timeout;
  interrupted?: 'timeout' | 'abort';
  /** The last process id given out before it started: its processes have later ones. */
  firstPid?: number;
  /** When the SIGINT went out (performance.now()). */
  interruptedAt?: number;
  /** Its end marker came (it may still wait for what it left behind to be killed). */
  settled?: true;
}

/**
 * A persistent bash process per conversation, on this machine, without isolation.
 * Commands run one at a time in the same shell, so `cd` and variables persist; each
 * gets `/dev/null` as stdin. A command that outlives its timeout (or whose signal
 * aborts) is interrupted with SIGINT; if it still does not stop, the shell is
 * replaced and the next command runs in a fresh one. An aborted `signal` interrupts
 * the same way and resolves with exit_code null and timed_out false (empty output if
 * the command had not started). A runtime starts once: after stop() or its death,
 * create a new one (the workspace is kept). `exit` or a failure under `set -e` ends
 * the shell, as in a terminal: the runtime dies.
 *
 * The shell's process group never outlives the server (see `lifeline.ts`): it is
 * killed when the server dies and, with `heartbeatTimeoutMs`, when the server stops
 * sending heartbeats (frozen), so that a command does not go on past the node's
 * lease while another node runs the conversation.
 */
export class LocalRuntime implements Runtime {
  readonly workspace: string;
  private state: State = 'new';
  private child: ChildProcessWithoutNullStreams | undefined;
  /**
   * The current shell's process group (what an interrupt signals) and the
   * shell's own pid: both the shell's pid without a sandbox; in one, the
   * sandbox's init leads the group. Unknown for the first milliseconds of a
   * sandbox, during which no command is sent.
   */
  private shell: { group: number; pid: number } | undefined;
  private starting: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private queue: Job[] = [];
  private current: Running | undefined;
  private readonly listeners = new Set<(exit: RuntimeExit) => void>();
  private watchdog: NodeJS.Timeout | undefined;
  private stopHeartbeat: (() => void) | undefined;

  constructor(
    readonly conversationId: string,
    private readonly config: LocalRuntimeConfig,
  ) {
    this.workspace = config.workspace;
  }

  get alive(): boolean {
    return this.state === 'alive';
  }

  /** The shell's process id (in a sandbox, as this machine sees it); undefined when no shell runs. */
  get pid(): number | undefined {
    return this.shell?.pid;
  }

  /** The process group of the shell and its commands; undefined when no shell runs. */
  get pgid(): number | undefined {
    return this.shell?.group;
  }

  start(): Promise<void> {
    if (this.state === 'stopped' || this.state === 'dead') {
      return Promise.reject(
        new RuntimeDeadError(`runtime of ${this.conversationId} is ${this.state}; create a new one`),
      );
    }
    this.starting ??= this.boot();
    return this.starting;
  }

  run(command: string, options: RunOptions = {}): Promise<CommandResult> {
    if (this.state !== 'alive') {
      return Promise.reject(new RuntimeDeadError(`runtime of ${this.conversationId} is ${this.state}`));
    }
    return this.enqueue(command, options.timeoutMs ?? this.config.commandTimeoutMs, options.signal);
  }

  stop(): Promise<void> {
    this.stopping ??= this.shutdown();
    return this.stopping;
  }

  onExit(listener: (exit: RuntimeExit) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private async boot(): Promise<void> {
    this.state = 'starting';
    await mkdir(this.workspace, { recursive: true });
    if (this.state !== 'starting')
      throw new RuntimeDeadError(`runtime of ${this.conversationId} was stopped while starting`);
    this.spawnShell();
    const ready = await this.enqueue(':', START_TIMEOUT_MS);
    if (ready.exit_code !== 0) {
      await this.stop();
      throw new RuntimeDeadError(`the shell of ${this.conversationId} did not answer: ${ready.output}`);
    }
    this.state = 'alive';
    this.watch();
  }

  /**
   * A shell that stops answering counts as dead: a process that was stopped
   * (SIGSTOP, state T) or is a zombie (Z) cannot run anything. Checked every
   * LIVENESS_MS, so a death is seen well within a second.
   */
  private watch(): void {
    this.watchdog = setInterval(() => {
      const pid = this.shell?.pid;
      if (pid === undefined || this.state !== 'alive') return;
      const state = processState(pid);
      if (state === 'T' || state === 't' || state === 'Z' || state === 'X') {
        this.die(
          { code: null, signal: state === 'Z' || state === 'X' ? 'SIGKILL' : 'SIGSTOP' },
          new Error(`the shell stopped answering (process state ${state})`),
        );
      }
    }, LIVENESS_MS);
    this.watchdog.unref();
  }

  private async shutdown(): Promise<void> {
    clearInterval(this.watchdog);
    this.stopHeartbeat?.();
    const child = this.child;
    const shell = this.shell;
    this.child = undefined;
    this.shell = undefined;
    this.state = 'stopped';
    this.listeners.clear();
    this.failAll(new RuntimeDeadError(`runtime of ${this.conversationId} was stopped`));
    if (child) {
      const exited = exitOf(child);
      killAll(child, shell);
      await exited;
      // In a sandbox bwrap may exit before its init and the shell are gone: stopped means gone.
      if (shell && shell.pid !== child.pid) await ended(shell.pid);
    }
  }

  private spawnShell(): void {
    const { sandbox, shell, env, secrets = {}, heartbeatTimeoutMs } = this.config;
    const argv = [shell, '--noprofile', '--norc'];
    // In a sandbox, a bash starts the lifeline's watcher outside it (no command reaches it), then becomes bwrap.
    const child: ChildProcessWithoutNullStreams = spawn(
      sandbox ? 'bash' : shell,
      sandbox ? sandboxedArgv(this.workspace, sandbox, heartbeatTimeoutMs, argv) : argv.slice(1),
      {
        cwd: this.workspace,
        // bwrap runs outside the sandbox: a secret named PATH or LD_PRELOAD must not reach it.
        env: sandbox ? sandboxEnv(env) : { ...env, ...secrets },
        detached: true, // own process group, so a signal reaches the shell and its children
        // fd 3 is a lifeline: it closes when this process dies, even by SIGKILL (see lifeline.ts);
        // fd 4 is where bwrap tells the pid of its child.
        stdio: sandbox ? ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'] : ['pipe', 'pipe', 'pipe', 'pipe'],
      },
    );
    this.child = child;
    this.shell = undefined;
    if (!sandbox) this.shell = child.pid === undefined ? undefined : { group: child.pid, pid: child.pid };
    else void this.learnSandboxPids(child);
    const line = child.stdio[3] as Socket | null;
    line?.unref();
    line?.on('error', () => {}); // a heartbeat to a shell that died; the exit handler reports it
    const mine = () => this.child === child;
    child.stdin.on('error', () => {}); // EPIPE after the shell died; the exit handler reports it
    child.stdout.on('data', (chunk: Buffer) => mine() && this.onOutput(chunk));
    child.stderr.on('data', (chunk: Buffer) => mine() && this.onOutput(chunk));
    child.on('error', (error) => mine() && this.die({ code: null, signal: null }, error));
    child.on('exit', (code, signal) => mine() && this.die(sandbox ? sandboxExit(code, signal) : { code, signal }));
    const exports = sandbox ? exportLines(secrets) : '';
    child.stdin.write((sandbox ? '' : lifeline(heartbeatTimeoutMs)) + exports + SHELL_PRELUDE);
    // One timer for the runtime, whichever shell is current (replaceShell spawns another).
    if (heartbeatTimeoutMs !== undefined && !this.stopHeartbeat) {
      this.stopHeartbeat = heartbeat(() => this.child?.stdio[3] as Socket | null | undefined, heartbeatTimeoutMs);
    }
  }

  /** Commands wait until the sandbox's pids are known, so that an interrupt reaches them. */
  private async learnSandboxPids(child: ChildProcessWithoutNullStreams): Promise<void> {
    const pids = await sandboxPids(child.stdio[SANDBOX_INFO_FD] as Readable);
    if (this.child !== child) return;
    if (!pids) return signalGroup(child, 'SIGKILL'); // its exit reports the death
    this.shell = { group: pids.group, pid: pids.shell };
    this.pump();
  }

  private die(exit: RuntimeExit, cause?: unknown): void {
    clearInterval(this.watchdog);
    this.stopHeartbeat?.();
    const wasAlive = this.state === 'alive';
    const child = this.child;
    const shell = this.shell;
    this.child = undefined;
    this.shell = undefined;
    this.state = 'dead';
    killAll(child, shell); // children the shell left behind
    const how = exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
    this.failAll(new RuntimeDeadError(`the shell of ${this.conversationId} exited (${how})`, { cause }));
    const listeners = [...this.listeners];
    this.listeners.clear();
    if (wasAlive) for (const listener of listeners) listener(exit);
  }

  private enqueue(command: string, timeoutMs: number, signal?: AbortSignal, first = false): Promise<CommandResult> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return resolve(notRun());
      const onAbort = () => this.abort(job);
      const detach = () => signal?.removeEventListener('abort', onAbort);
      const job: Job = { command, timeoutMs, resolve, reject, detach };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (first) this.queue.unshift(job);
      else this.queue.push(job);
      this.pump();
    });
  }

  private pump(): void {
    if (this.current || !this.child || !this.shell) return;
    const job = this.queue.shift();
    if (!job) return;
    const run: Running = {
      job,
      capture: new OutputCapture(job.command, this.config.outputCapBytes),
      firstPid: lastPid(),
    };
    this.current = run;
    if (Number.isFinite(job.timeoutMs)) {
      run.timer = setTimeout(() => this.interrupt(run, 'timeout'), Math.min(job.timeoutMs, MAX_TIMER_MS));
    }
    this.child.stdin.write(run.capture.line);
  }

  private onOutput(chunk: Buffer): void {
    const run = this.current;
    if (!run || run.settled) return; // output of background jobs between commands
    const code = run.capture.push(chunk);
    if (code !== undefined) this.settle(run, code);
  }

  private abort(job: Job): void {
    if (this.current?.job === job) return this.interrupt(this.current, 'abort');
    const at = this.queue.indexOf(job);
    if (at < 0) return;
    this.queue.splice(at, 1);
    job.resolve(notRun());
  }

  private interrupt(run: Running, why: 'timeout' | 'abort'): void {
    if (this.current !== run || run.interrupted || run.settled) return;
    run.interrupted = why;
    run.interruptedAt = performance.now();
    clearTimeout(run.timer);
    signalPid(-this.shell!.group, 'SIGINT');
    run.grace = setTimeout(() => this.replaceShell(run), this.config.interruptGraceMs);
  }

  private replaceShell(run: Running): void {
    if (this.current !== run) return;
    const stuck = this.child;
    const stuckShell = this.shell;
    this.child = undefined; // its exit is expected: no onExit
    killAll(stuck, stuckShell);
    this.spawnShell();
    this.settle(run, null, RESTART_NOTE, false);
  }

  private settle(run: Running, code: number | null, note = '', reap = true): void {
    clearTimeout(run.timer);
    clearTimeout(run.grace);
    run.job.detach();
    run.settled = true;
    const { output, truncated } = run.capture.finish();
    const result = {
      exit_code: run.interrupted ? null : code,
      output: output + note,
      timed_out: run.interrupted === 'timeout',
      truncated,
    };
    if (!run.interrupted || !reap || !this.shell) {
      this.current = undefined;
      run.job.resolve(result);
      return this.pump();
    }
    // An interrupted command is over only when nothing it started is left: what ignored
    // the SIGINT (a background job) gets SIGKILL once the grace period is over. What earlier
    // commands left running on purpose is spared.
    const shell = this.shell;
    const until = (run.interruptedAt ?? performance.now()) + this.config.interruptGraceMs;
    void reapStragglers(shell, run.firstPid, until, () => this.shell === shell).then(async (killed) => {
      if (this.current === run) this.current = undefined;
      // bash reports the jobs it lost ("Killed ...") before its next command: a no-op takes that report.
      if (killed) await this.enqueue(':', START_TIMEOUT_MS, undefined, true).catch(() => undefined);
      run.job.resolve(result);
      this.pump();
    });
  }

  private failAll(error: RuntimeDeadError): void {
    const jobs = this.current ? [this.current.job, ...this.queue] : this.queue;
    if (this.current) {
      clearTimeout(this.current.timer);
      clearTimeout(this.current.grace);
    }
    this.current = undefined;
    this.queue = [];
    for (const job of jobs) {
      job.detach();
      job.reject(error);
    }
  }
}
