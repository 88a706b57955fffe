import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { StatusFrame } from '../../protocol/index.ts';
import { errorFields } from '../logger.ts';
import type { McpConnections } from '../mcp/index.ts';
import type { Runtime } from '../runtime/index.ts';
import { STATUS } from './effectResults.ts';
import type { EffectDeps, EffectHost } from './effectRunner.ts';
import { prepareRepository } from './repositoryStart.ts';
import { openMcp } from './toolCalls.ts';

/** A workspace's own set-up script, relative to the workspace. */
const SETUP_SCRIPT = '.tether/setup.sh';

/** What a runtime's start works with: the session, its dependencies, the session's abort signal, its status frames. */
export interface RuntimeStart {
  host: EffectHost;
  deps: EffectDeps;
  /** Aborted when the session stops: the start ends, and what it started is stopped. */
  signal: AbortSignal;
  status: (frame: Omit<StatusFrame, 'type'>) => void;
}

/** A started runtime and the MCP servers started with it. */
export interface StartedRuntime {
  process: Runtime;
  mcp: McpConnections | null;
}

/**
 * A new runtime for the conversation, each step stored as it comes (`starting`,
 * `connecting`, `setting_up`): created and started, the repository cloned and
 * its instruction files read, the workspace's set-up script run, the MCP
 * servers started and their tools listed. A start that fails is stored as the
 * runtime lost (`runtime_lost`, with why). Null then, after a failed clone
 * (stored by the clone), or when the session stops meanwhile; whatever started
 * is stopped. Storing `connected` is the caller's, once it holds the runtime.
 */
export async function startRuntime(start: RuntimeStart): Promise<StartedRuntime | null> {
  const { host, deps, signal, status } = start;
  await progress(start, 'starting');
  const runtime = deps.runtimes.create(host.conversationId, { env: deps.secrets });
  let mcp: McpConnections | null = null;
  try {
    await progress(start, 'connecting');
    await runtime.start();
    if (signal.aborted) throw new Error('the session is closing');
    await progress(start, 'setting_up');
    if (!(await prepareRepository({ host, deps, signal }, runtime.workspace, status))) {
      await runtime.stop();
      return null;
    }
    await setUpWorkspace(runtime, deps, signal);
    if (!runtime.alive) throw new Error('the runtime exited while it was being set up');
    mcp = await openMcp(host, deps, runtime.workspace, signal, status);
  } catch (err) {
    await mcp?.close();
    await runtime.stop();
    if (signal.aborted) return null;
    status(STATUS.failed);
    await host.decide({ type: 'runtime_lost', message: `the runtime failed to start: ${errorFields(err).error}` });
    return null;
  }
  if (signal.aborted) {
    await stopStarted({ process: runtime, mcp });
    return null;
  }
  return { process: runtime, mcp };
}

/** One step of a runtime's start: a stored status and a transient status frame. */
export async function progress(
  { host, status }: Pick<RuntimeStart, 'host' | 'status'>,
  step: 'starting' | 'connecting' | 'setting_up' | 'connected',
): Promise<void> {
  await host.decide({ type: 'runtime_progress', status: step });
  status(STATUS[step]);
}

/** Stops a runtime and the MCP servers started with it. */
export async function stopStarted(started: StartedRuntime): Promise<void> {
  await Promise.all([started.mcp?.close(), started.process.stop()]);
}

/**
 * Runs the workspace's own set-up script, `.tether/setup.sh`, when there is
 * one, each time a runtime starts there (so also after a reconnect). A
 * failing script fails the start, with its exit code and the end of its output.
 */
async function setUpWorkspace(runtime: Runtime, deps: EffectDeps, signal: AbortSignal): Promise<void> {
  if (!existsSync(join(runtime.workspace, SETUP_SCRIPT))) return;
  const result = await runtime.run(`bash ${SETUP_SCRIPT}`, { timeoutMs: deps.commandTimeoutMs, signal });
  if (result.exit_code === 0) return;
  const how = result.timed_out ? 'timed out' : `exit ${result.exit_code}`;
  throw new Error(`the workspace set-up script ${SETUP_SCRIPT} failed (${how}): ${result.output.slice(-500)}`);
}
