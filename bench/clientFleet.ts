// The parent's handle on clientProcess.ts: one node process holding every
// client of the append benchmark (Tether's ws clients, or the Socket.IO
// baseline's), driven one command at a time over IPC.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { NODE_FLAGS, REPO_ROOT, benchFile } from './benchFiles.ts';
import type { ClientSpec, FleetCommand, FleetReply, Frame, RoomSpec } from './clientProcess.ts';

export type { ClientSpec, Frame, RoomSpec };

/** A paced run as the client process measured it (see latencyPacing.ts). */
export interface PacedTiming {
  ms: number;
  latencies: Float64Array;
  /** Per client of a conversation, in `connect`'s order with the sender first: each message's latency to it. */
  memberLatencies: Float64Array[];
  sendLags: Float64Array;
}

export class ClientFleet {
  readonly #child: ChildProcess;
  #pending: { resolve: (reply: FleetReply) => void; reject: (err: Error) => void } | null = null;
  #exited: Error | null = null;

  private constructor(child: ChildProcess) {
    this.#child = child;
    child.on('message', (reply: FleetReply) => {
      const pending = this.#pending;
      this.#pending = null;
      if (reply.type === 'failed') pending?.reject(new Error(`the client process failed: ${reply.error}`));
      else pending?.resolve(reply);
    });
    child.on('exit', (code, signal) => {
      this.#exited = new Error(`the client process exited (${signal ?? code})`);
      this.#pending?.reject(this.#exited);
      this.#pending = null;
    });
  }

  /** Starts the client process (plain node with tsx, no server code loaded). */
  static start(): ClientFleet {
    const child = fork(fileURLToPath(benchFile('clientProcess')), [], {
      execArgv: [...NODE_FLAGS],
      // The repository root, so that `--import tsx` finds this checkout's tsx wherever the bench was started.
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    return new ClientFleet(child);
  }

  get pid(): number {
    const pid = this.#child.pid;
    if (pid === undefined) throw new Error('the client process did not start');
    return pid;
  }

  /** Opens every client's ws (each resolves on its `sync` frame). */
  async connect(wsBase: string, clients: ClientSpec[]): Promise<void> {
    await this.#ask({ type: 'connect', wsBase, clients });
  }

  /** Connects the Socket.IO baseline's clients, room by room, the sender of each first. */
  async connectSocketIo(url: string, rooms: RoomSpec[]): Promise<void> {
    await this.#ask({ type: 'connectSocketIo', url, rooms });
  }

  /**
   * Every sending client sends `messages` messages with at most `window` in
   * flight; resolves when every client has every event they caused, with the
   * client side's own timing in ms (first send to last client done).
   */
  async run(messages: number, window: number, settle = true): Promise<number> {
    const reply = await this.#ask({ type: 'run', messages, window, settle });
    if (reply.type !== 'done') throw new Error(`the client process answered ${reply.type} to run`);
    return reply.ms;
  }

  /**
   * Open loop: every sender sends `messages` on a fixed schedule, `perSecond`
   * in all; resolves when every client has every message, with each message's
   * latency (due → the last client of its conversation has it).
   */
  async paced(messages: number, perSecond: number): Promise<PacedTiming> {
    const reply = await this.#ask({ type: 'paced', messages, perSecond });
    if (reply.type !== 'paced') throw new Error(`the client process answered ${reply.type} to paced`);
    return {
      ms: reply.ms,
      latencies: reply.latencies,
      memberLatencies: reply.memberLatencies,
      sendLags: reply.sendLags,
    };
  }

  /**
   * Every client's frames so far, in the order of `connect` (for Socket.IO:
   * room by room, sender first). Asked apart from `run`, so their shipping is not measured.
   */
  async frames(): Promise<Frame[][]> {
    const reply = await this.#ask({ type: 'frames' });
    if (reply.type !== 'frames') throw new Error(`the client process answered ${reply.type} to frames`);
    return reply.received;
  }

  async close(): Promise<void> {
    if (!this.#exited) await this.#ask({ type: 'close' });
  }

  stop(): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill();
  }

  #ask(command: FleetCommand): Promise<FleetReply> {
    if (this.#exited) return Promise.reject(this.#exited);
    if (this.#pending) return Promise.reject(new Error(`the client process is still busy (asked to ${command.type})`));
    return new Promise((resolve, reject) => {
      this.#pending = { resolve, reject };
      this.#child.send(command);
    });
  }
}
