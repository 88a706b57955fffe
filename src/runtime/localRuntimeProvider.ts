import { existsSync } from 'node:fs';
import { cp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { ConversationId } from '../../protocol/index.ts';
import { LocalRuntime } from './localRuntime.ts';
import { cloneRepository } from './gitClone.ts';
import type { RuntimeOptions, RuntimeProvider } from './runtime.ts';
import type { SandboxOptions } from './sandbox.ts';
import { serverFreeEnv } from './serverFreeEnv.ts';

export interface LocalRuntimeProviderOptions {
  /** Each conversation works in `<workspaceRoot>/<conversationId>`, created if missing. */
  workspaceRoot: string;
  commandTimeoutMs?: number;
  /** Output kept per command; the head is kept and the rest dropped as it arrives. */
  outputCapBytes?: number;
  /** A bash-compatible shell: commands are passed as `$'...'` strings to `eval`. */
  shell?: string;
  /** How long an interrupted command gets to stop before its shell is replaced. */
  interruptGraceMs?: number;
  /** Environment the shells inherit, minus `TETHER_*` and `NATS_*`. Defaults to process.env. */
  baseEnv?: NodeJS.ProcessEnv;
  /**
   * When set, a shell that got no heartbeat from this process for this long kills
   * itself and everything it runs, as it does when this process dies. Heartbeats go
   * out every quarter of it. Why: in a cluster, a frozen node (SIGSTOP, a paused VM)
   * keeps its pipes open, and its command must not outlive the node's lease while
   * another node takes the conversation over; the server will set half the node
   * lease. Unset, only this process's death ends the shell. At least 1.
   */
  heartbeatTimeoutMs?: number;
  /** Set: each shell runs in a bubblewrap sandbox that sees only its own workspace (see `sandbox.ts`). */
  sandbox?: SandboxOptions;
}

/** Runs each conversation's commands in a local bash under `workspaceRoot`. */
export function localRuntimeProvider(options: LocalRuntimeProviderOptions): RuntimeProvider {
  const { workspaceRoot, commandTimeoutMs = 30_000, outputCapBytes = 64 * 1024 } = options;
  const { shell = 'bash', interruptGraceMs = 1_000, baseEnv = process.env, heartbeatTimeoutMs, sandbox } = options;
  if (heartbeatTimeoutMs !== undefined && !(Number.isFinite(heartbeatTimeoutMs) && heartbeatTimeoutMs >= 1)) {
    throw new RangeError(`heartbeatTimeoutMs must be a finite number of at least 1, not ${heartbeatTimeoutMs}`);
  }
  // An id becomes a directory name: refuse anything that could leave the root.
  const workspaceOf = (conversationId: string) => {
    if (!ConversationId.safeParse(conversationId).success) {
      throw new TypeError(`not a conversation id: ${JSON.stringify(conversationId)}`);
    }
    return join(workspaceRoot, conversationId);
  };
  return {
    sandbox: sandbox ? 'bwrap' : 'none',
    async copyWorkspace(from: string, to: string): Promise<void> {
      const [source, target] = [workspaceOf(from), workspaceOf(to)];
      // A parent that never started a runtime has no workspace yet: nor has the fork.
      if (!existsSync(source)) return;
      await cp(source, target, { recursive: true, errorOnExist: true, force: false, verbatimSymlinks: true });
    },
    async removeWorkspace(conversationId: string): Promise<void> {
      await rm(workspaceOf(conversationId), { recursive: true, force: true });
    },
    cloneRepository(conversationId, repository, run) {
      // Under the shells' self-kill rule: a frozen node's clone dies within the same half lease.
      const dir = workspaceOf(conversationId);
      return cloneRepository({ ...repository, ...run, dir, heartbeatTimeoutMs, env: baseEnv });
    },
    create(conversationId: string, runtimeOptions: RuntimeOptions = {}): LocalRuntime {
      return new LocalRuntime(conversationId, {
        workspace: workspaceOf(conversationId),
        env: serverFreeEnv(baseEnv),
        secrets: runtimeOptions.env,
        shell,
        commandTimeoutMs,
        outputCapBytes,
        interruptGraceMs,
        heartbeatTimeoutMs,
        sandbox,
      });
    },
  };
}
