/** What a finished (or stopped) command produced. */
export interface CommandResult {
  /** null when the command did not finish (timed out or its runtime died). */
  exit_code: number | null;
  /** stdout and stderr interleaved, cut at the runtime's output cap. */
  output: string;
  timed_out: boolean;
  truncated: boolean;
}

export interface RunOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RuntimeExit {
  code: number | null;
  signal: string | null;
}

/**
 * Where a conversation's commands run. One runtime per conversation; commands
 * run one at a time and share shell state (cwd, variables) between them.
 */
export interface Runtime {
  readonly conversationId: string;
  readonly workspace: string;
  /** True from a successful start() until the runtime stops or dies. */
  readonly alive: boolean;
  start(): Promise<void>;
  /**
   * Runs one command. Resolves with its result, also on timeout (timed_out,
   * exit_code null). Rejects with RuntimeDeadError when the runtime is not
   * alive or dies during the command.
   */
  run(command: string, options?: RunOptions): Promise<CommandResult>;
  /** Stops the runtime; the workspace stays. Idempotent. */
  stop(): Promise<void>;
  /** Called once when the runtime dies by itself (not after stop()). Returns an unsubscribe. */
  onExit(listener: (exit: RuntimeExit) => void): () => void;
}

export interface RuntimeOptions {
  /** Extra environment for the runtime's processes (for example the conversation's secrets). */
  env?: Record<string, string>;
}

export interface RuntimeProvider {
  /** How its shells are confined (`GET /api/conversations/:id` says it); absent: none. */
  readonly sandbox?: 'bwrap' | 'none';
  create(conversationId: string, options?: RuntimeOptions): Runtime;
  /**
   * Copies a conversation's workspace, as it is now, to a new conversation
   * (a fork). Files are not event-sourced: the copy is of the files, not of
   * the parent's history. Absent: runtimes without files.
   */
  copyWorkspace?(from: string, to: string): Promise<void>;
  /** Removes the workspace of a conversation that was never answered (half a fork or a creation). */
  removeWorkspace?(conversationId: string): Promise<void>;
  /**
   * Clones a repository into a conversation's workspace (emptied first: what
   * an interrupted clone left), by this process, outside the sandbox. Rejects
   * with a `CloneError` saying why. Absent: runtimes without files.
   */
  cloneRepository?(conversationId: string, repository: RepositoryToClone, options: CloneRun): Promise<ClonedRepository>;
}

export interface RepositoryToClone {
  url: string;
  branch?: string;
  /** Given to that one git's environment only. */
  token?: string;
}

export interface CloneRun {
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface ClonedRepository {
  /** The sha of the commit checked out. */
  commit: string;
  /** The branch checked out: the one asked for, else the remote's default. */
  branch: string;
}
