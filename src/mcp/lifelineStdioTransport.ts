import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { heartbeat, lifeline } from '../runtime/lifeline.ts';
import type { McpStdioServer } from './mcpConfig.ts';

/** How much of a server's stderr is kept to explain why it failed. */
const STDERR_TAIL_BYTES = 2048;
/** How long a closed server has between SIGTERM and SIGKILL. */
const CLOSE_GRACE_MS = 1_000;
/** How long output still in the pipe may take to arrive after the server exited. */
const DRAIN_AFTER_EXIT_MS = 200;

/** Variables bash exports on its own: the server must see only what the operator declared. */
const BASH_ADDED = ['PWD', 'OLDPWD'];

export interface LifelineStdioOptions {
  server: McpStdioServer;
  /** The conversation's workspace: the server's working directory. */
  cwd: string;
  /** Where PATH and HOME come from (the server's own environment); nothing else of it is passed on. */
  baseEnv: NodeJS.ProcessEnv;
  /** See `lifeline()`: without heartbeats for this long, the server's group is killed. */
  heartbeatMs?: number;
}

/**
 * An MCP stdio transport over a child in its own process group, tied to this
 * process by the runtime's lifeline (fd 3, see `src/runtime/lifeline.ts`): the
 * SDK's `StdioClientTransport` spawns without either, so its servers could
 * outlive a server that was SIGKILLed. bash starts the lifeline's watcher,
 * then becomes the command (through `env -u`, which drops what bash exported).
 */
export class LifelineStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;

  private child: ChildProcess | undefined;
  private readonly readBuffer = new ReadBuffer();
  private stderr = '';
  private exitInfo: string | undefined;
  private exited: Promise<void> | undefined;
  private ending: Promise<void> | undefined;
  /** Whether `close()` came first: the exit was this side's doing. */
  private closedHere = false;
  private stopHeartbeat: (() => void) | undefined;

  constructor(private readonly options: LifelineStdioOptions) {}

  /** The server's process id (its group's too), once started. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /**
   * How the server ended on its own (not through `close()`), with the end of
   * its stderr ("exited (code 1): ..."); undefined while it runs or once closed.
   */
  get died(): string | undefined {
    if (this.exitInfo === undefined || this.closedHere) return undefined;
    // The declared env may hold the server's own keys: a server that prints one does not get it stored.
    const values = Object.values(this.options.server.env).filter((v) => v.length >= 4);
    const tail = values.reduce((text, value) => text.split(value).join('<secret_hidden>'), this.stderr.trim());
    return tail ? `${this.exitInfo}: ${tail}` : this.exitInfo;
  }

  async start(): Promise<void> {
    if (this.child) throw new Error('this transport was started already');
    const { server, cwd, heartbeatMs } = this.options;
    const unset = BASH_ADDED.filter((name) => !(name in server.env));
    // bash sets SHLVL again as it execs: env drops it (env by its path: the declared PATH may lack it).
    const dropLevel = 'SHLVL' in server.env ? '' : '-u SHLVL ';
    const script = `${lifeline(heartbeatMs)}unset ${unset.join(' ')}\nexec /usr/bin/env ${dropLevel}-- "$0" "$@"\n`;
    const child = spawn('bash', ['--noprofile', '--norc', '-c', script, server.command, ...server.args], {
      cwd,
      env: this.environment(),
      detached: true, // its own process group, so that closing reaches whatever it started
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'], // fd 3: the lifeline, which closes when this process dies
    });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const line = child.stdio[3] as Socket | null;
    line?.unref();
    line?.on('error', () => {}); // a heartbeat to a dead server: its exit says so
    child.stdin?.on('error', () => {}); // EPIPE after it died: its exit says so
    child.stdout?.on('data', (chunk: Buffer) => this.read(chunk));
    child.stderr?.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-STDERR_TAIL_BYTES);
    });
    child.on('exit', (code, signal) => void this.ended(signal ? `exited (signal ${signal})` : `exited (code ${code})`));
    if (heartbeatMs !== undefined) this.stopHeartbeat = heartbeat(() => line, heartbeatMs);
    child.on('error', (error) => void this.ended(`failed (${error.message})`)); // no process, or a lost one
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  }

  async send(message: JSONRPCMessage): Promise<void> {
    if (this.exitInfo !== undefined) throw new Error(`the server ${this.exitInfo}`);
    const stdin = this.child?.stdin;
    if (!stdin) throw new Error('the server was not started');
    // A server that closed its stdin is on its way out: its exit fails whatever waits for an answer, in words.
    if (!stdin.writable) return;
    if (!stdin.write(serializeMessage(message))) await writable(stdin);
  }

  /** SIGTERM to the server's group, SIGKILL after a grace; resolves once the server is gone. */
  async close(): Promise<void> {
    const child = this.child;
    if (this.exitInfo === undefined) this.closedHere = true;
    if (child?.pid !== undefined && this.exitInfo === undefined) {
      signalGroup(child.pid, 'SIGTERM');
      const grace = new Promise((resolve) => setTimeout(resolve, CLOSE_GRACE_MS).unref());
      await Promise.race([this.exited, grace]);
    }
    await this.ended('was closed');
  }

  private environment(): Record<string, string> {
    const { baseEnv, server } = this.options;
    const env: Record<string, string> = {};
    for (const name of ['PATH', 'HOME']) {
      const value = baseEnv[name];
      if (value !== undefined) env[name] = value;
    }
    return { ...env, ...server.env };
  }

  private read(chunk: Buffer): void {
    try {
      this.readBuffer.append(chunk);
    } catch (error) {
      this.onerror?.(error as Error); // a line beyond the buffer's bound: nothing after it can be trusted
      void this.close();
      return;
    }
    for (;;) {
      try {
        const message = this.readBuffer.readMessage();
        if (message === null) return;
        this.onmessage?.(message);
      } catch (error) {
        this.onerror?.(error as Error); // a line that is not JSON-RPC (a log line on stdout): skipped
      }
    }
  }

  /**
   * The end, once: whatever the server left in its group is killed (its
   * lifeline's watcher included), output still on its way is read, then the
   * client hears of it (its pending requests fail).
   */
  private ended(how: string): Promise<void> {
    this.exitInfo ??= how;
    return (this.ending ??= this.finish());
  }

  private async finish(): Promise<void> {
    this.stopHeartbeat?.();
    const child = this.child;
    if (child?.pid !== undefined) {
      signalGroup(child.pid, 'SIGKILL');
      await this.exited;
      await drained(child.stdout, DRAIN_AFTER_EXIT_MS);
      (child.stdio[3] as Socket | null)?.destroy();
    }
    this.readBuffer.clear();
    this.onclose?.();
  }
}

/** Signals a process group that may be gone already. */
function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: gone.
  }
}

/** Resolves when `stdin` drained, or closed (then the exit says why). */
function writable(stdin: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      stdin.off('drain', done);
      stdin.off('close', done);
      resolve();
    };
    stdin.on('drain', done);
    stdin.on('close', done);
  });
}

/** Resolves when `stream` ended, or after `ms` (something else may hold its pipe). */
function drained(stream: Readable | null, ms: number): Promise<void> {
  if (!stream || stream.readableEnded || stream.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    timer.unref();
    stream.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
