// The parent's handle on resumeProcess.ts: one node process holding the
// resume benchmark's clients (Tether and Socket.IO), driven one command at a
// time over IPC.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { NODE_FLAGS, REPO_ROOT, benchFile } from './benchFiles.ts';
import type { Frame, ResumeCommand, ResumeReply } from './resumeProcess.ts';

export type { Frame };

type Reply<T extends ResumeReply['type']> = Extract<ResumeReply, { type: T }>;

export class ResumeClients {
  readonly #child: ChildProcess;
  #pending: { resolve: (reply: ResumeReply) => void; reject: (err: Error) => void } | null = null;
  #exited: Error | null = null;

  private constructor(child: ChildProcess) {
    this.#child = child;
    child.on('message', (reply: ResumeReply) => {
      const pending = this.#pending;
      this.#pending = null;
      if (reply.type === 'failed') pending?.reject(new Error(`the resume client process failed: ${reply.error}`));
      else pending?.resolve(reply);
    });
    child.on('exit', (code, signal) => {
      this.#exited = new Error(`the resume client process exited (${signal ?? code})`);
      this.#pending?.reject(this.#exited);
      this.#pending = null;
    });
  }

  /** Starts the client process (plain node with tsx, no server code loaded). */
  static start(): ResumeClients {
    const child = fork(fileURLToPath(benchFile('resumeProcess')), [], {
      execArgv: [...NODE_FLAGS],
      // The repository root, so that `--import tsx` finds this checkout's tsx wherever the bench was started.
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    return new ResumeClients(child);
  }

  get pid(): number {
    const pid = this.#child.pid;
    if (pid === undefined) throw new Error('the resume client process did not start');
    return pid;
  }

  /** Sends one command and checks the kind of its answer. */
  async ask<T extends ResumeReply['type']>(command: ResumeCommand, expect: T): Promise<Reply<T>> {
    const reply = await this.#ask(command);
    if (reply.type !== expect) throw new Error(`the resume client process answered ${reply.type} to ${command.type}`);
    return reply as Reply<T>;
  }

  async close(): Promise<void> {
    if (!this.#exited) await this.#ask({ type: 'close' });
  }

  stop(): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill();
  }

  #ask(command: ResumeCommand): Promise<ResumeReply> {
    if (this.#exited) return Promise.reject(this.#exited);
    if (this.#pending)
      return Promise.reject(new Error(`the resume client process is still busy (asked to ${command.type})`));
    return new Promise((resolve, reject) => {
      this.#pending = { resolve, reject };
      this.#child.send(command);
    });
  }
}
