import type { DecisionInput, Effect, RepositoryProgress } from '../../machines/index.ts';
import type { Agent, AgentContext, ListedServers } from '../agent/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { DeltaFrame, StatusFrame } from '../../protocol/index.ts';
import type { Runtime, RuntimeProvider } from '../runtime/index.ts';
import type { DeltaChannel, EventLog, StatusChannel } from '../store/index.ts';
import { callTool } from './toolCalls.ts';
import { progress, startRuntime, stopStarted, type StartedRuntime } from './runtimeStart.ts';
import type { McpHub } from '../mcp/index.ts';
import { AgentSteps } from './agentSteps.ts';
import type { DeltaStream } from './deltaStream.ts';
import { outcomeOf, STATUS } from './effectResults.ts';
import { IllegalTransitionError, SessionUnavailableError } from '../errors.ts';

export interface EffectDeps {
  log: EventLog;
  /** Transient status frames to every node's clients of the conversation (never stored). */
  status: StatusChannel;
  /** Deltas of agent replies to every node's clients (never stored); none: replies are not streamed to clients. */
  deltas?: DeltaChannel;
  /** The wait before an agent step's next attempt after a failing server; it doubles each attempt (default 500 ms). */
  retryBaseMs?: number;
  agent: Agent;
  runtimes: RuntimeProvider;
  clock: () => Date;
  logger: Logger;
  /** Given to the runtime's environment; never stored. */
  secrets: Record<string, string>;
  commandTimeoutMs?: number;
  /** How long a repository's clone may take (default 120 s). */
  cloneTimeoutMs?: number;
  /** False once this node may no longer act as the conversation's owner (its lease lapsed): no effect starts. */
  leaseValid?: () => boolean;
  /** The node's MCP servers (none: no MCP tools, and no `tools_listed` is stored). */
  mcp?: McpHub;
  /** TETHER_CONFIRM_UNKNOWN: a call the model did not rate waits in confirmation mode (default true). */
  confirmUnknown?: boolean;
}

/** The part of a session that effects talk back to: every result goes to the decider. */
export interface EffectHost {
  readonly conversationId: string;
  /** The agent's context, which has observed every stored event. */
  agentContext(): Promise<AgentContext>;
  decide(input: DecisionInput): Promise<unknown>;
  /** The stored event that asked for the runtime the session wants now (`context.runtimeCause`). */
  runtimeCause(): number;
  /** Why the runtime is down, from the session's state (the log), or null. */
  runtimeLost(): string | null;
  /** The conversation's repository and how far its workspace has come (the log), or null without one. */
  repository(): RepositoryProgress | null;
  /** The MCP tools the log listed last (`tools_listed`), or null when it never listed any. */
  toolsListed(): Promise<ListedServers | null>;
}

type EffectName = 'agent step' | 'command' | 'tool call' | 'runtime start' | 'runtime stop';

/** A live runtime, the MCP servers started with it, and the event that asked for it. */
type LiveRuntime = StartedRuntime & { cause: number };

/**
 * Runs the effects a session's state asks for (`effectsOf`): a runtime (with
 * its MCP servers: `runtimeStart.ts`), an agent step, a command, a tool call
 * (`toolCalls.ts`), or the report of a call that cannot run. What the
 * session does next is never decided here: it keeps only the processes at
 * hand (the live runtime, named by the event that asked for it, a start under
 * way, a death being reported) and an abort signal. Every result goes back to
 * the decider, so it is stored before it takes effect, and a result the
 * session no longer wants (a stale step) is refused and dropped.
 */
export class EffectRunner {
  readonly #host: EffectHost;
  readonly #deps: EffectDeps;
  readonly #abort = new AbortController();
  #runtime: LiveRuntime | null = null;
  #starting: { done: Promise<Runtime | null>; cause: number } | null = null;
  #death: Promise<unknown> | null = null;
  /** The MCP servers' tools were listed on this node (by a runtime's start). */
  #mcpListed = false;
  readonly #agent: AgentSteps;

  constructor(host: EffectHost, deps: EffectDeps) {
    this.#host = host;
    this.#deps = deps;
    this.#agent = new AgentSteps(host, deps);
  }

  /** The current agent step attempt's deltas from index 0 (any node asks for them to catch a client up), or null. */
  currentDeltas(): readonly DeltaFrame[] | null {
    return this.#agent.currentDeltas();
  }

  /** Holds the deltas of an attempt that a decided state no longer waits for (see `AgentSteps.holdUnless`). */
  holdDeltasUnless(cause: number | null, attempt: number): DeltaStream | null {
    return this.#agent.holdUnless(cause, attempt);
  }

  /**
   * Runs one effect to its end, or until `cut` aborts it (the state no longer
   * asks for it) or the session stops; never rejects (a refused or failed result is logged).
   */
  run(effect: Exclude<Effect, { type: 'wake_at' }>, cut?: AbortSignal): Promise<void> {
    const signal = cut ? AbortSignal.any([this.#abort.signal, cut]) : this.#abort.signal;
    return Promise.resolve()
      .then(() => this.#dispatch(effect, signal))
      .then(
        () => undefined,
        (err: unknown) => this.#dropped(err),
      );
  }

  /** Stops every effect and the runtime; `why` names the cause in debug lines. */
  async stop(why: string): Promise<void> {
    this.#abort.abort();
    // A start under way (a clone, a sandbox coming up) sees the abort and ends: wait for it, boundedly
    // (a stop asked from inside the start's own decision must not wait for itself).
    const starting = this.#starting?.done.catch(() => undefined);
    if (starting) await Promise.race([starting, new Promise((resolve) => setTimeout(resolve, 1_000).unref())]);
    const runtime = this.#runtime;
    this.#runtime = null;
    if (runtime) await this.#timed('runtime stop', why, () => stopStarted(runtime));
  }

  #dispatch(effect: Exclude<Effect, { type: 'wake_at' }>, signal: AbortSignal): Promise<unknown> {
    const { cause } = effect;
    // Fenced: a node whose lease may have lapsed starts nothing (another node may own the conversation now).
    if (this.#deps.leaseValid?.() === false)
      throw new SessionUnavailableError(this.#host.conversationId, 'the lease lapsed');
    switch (effect.type) {
      case 'start_runtime':
        return this.#ensureRuntime(cause);
      case 'ask_agent':
        return this.#timed('agent step', cause, async () => {
          await this.#toolsListed();
          return this.#agent.ask(cause, effect.attempt, signal);
        });
      case 'run_command':
        return this.#timed('command', cause, () => this.#runCommand(cause, effect.command, signal));
      case 'call_tool':
        return this.#timed('tool call', cause, () => this.#callTool(effect, signal));
      case 'fail_command': {
        const { command, why, callId, tool } = effect;
        return this.#host.decide({ type: 'command_unavailable', cause, command, why, callId, tool });
      }
      case 'interrupt_command': {
        const { command, callId, tool } = effect;
        const why = `the server stopped before this ${tool === undefined ? 'command' : 'call'} finished`;
        return this.#host.decide({ type: 'command_interrupted', cause, command, why, callId, tool });
      }
    }
  }

  /**
   * Before this node's first agent step, the MCP servers' tools are listed
   * (and stored when they changed): they start with the runtime, so a new
   * owner, a restart or a fork starts it first (not a lost one: the agent
   * answers with the tools last listed, and their calls fail until a reconnect).
   */
  async #toolsListed(): Promise<void> {
    if (!this.#deps.mcp?.configured || this.#mcpListed || this.#host.runtimeLost() !== null) return;
    await this.#ensureRuntime(this.#host.runtimeCause());
  }

  #dropped(err: unknown): void {
    const fields = { conversation_id: this.#host.conversationId };
    if (err instanceof IllegalTransitionError || err instanceof SessionUnavailableError) {
      // Expected after a stop or a release: the result of an abandoned effect is refused.
      this.#deps.logger.info('effect result dropped', { ...fields, reason: err.message });
      return;
    }
    this.#deps.logger.error('session effect failed', { ...fields, ...errorFields(err) });
  }

  /**
   * Runs one effect's work. At debug level its start and its end are logged
   * with the conversation, the cause (the id of the stored event that asked for
   * it, or why it runs) and how it ended; at other levels this costs nothing.
   */
  async #timed<T>(effect: EffectName, cause: number | string, work: () => Promise<T>): Promise<T> {
    const logger = this.#deps.logger;
    if (!logger.isDebug) return work();
    const fields = { conversation_id: this.#host.conversationId, effect, cause };
    logger.debug('effect started', fields);
    const started = performance.now();
    const ms = () => Math.round(performance.now() - started);
    try {
      const result = await work();
      const outcome = outcomeOf(result);
      logger.debug('effect finished', { ...fields, outcome, ms: ms() });
      return result;
    } catch (err) {
      logger.debug('effect failed', { ...fields, ...errorFields(err), ms: ms() });
      throw err;
    }
  }

  #status(frame: Omit<StatusFrame, 'type'>): void {
    this.#deps.status.publish(this.#host.conversationId, { type: 'status', ...frame });
  }

  /**
   * The runtime asked for by event `cause`: the live one when it is that one,
   * else a new one (an older one is stopped first: a reconnect replaces it).
   */
  async #ensureRuntime(cause: number): Promise<Runtime | null> {
    for (;;) {
      if (this.#abort.signal.aborted) return null;
      if (this.#runtime?.cause === cause && this.#runtime.process.alive) return this.#runtime.process;
      if (this.#starting?.cause === cause) return this.#starting.done;
      if (!this.#starting) break;
      // Another start (for an older cause) finishes first; then look again.
      await this.#starting.done;
    }
    // Taken at once, before anything is awaited: a second caller finds this start and waits for it.
    const old = this.#runtime;
    this.#runtime = null;
    const done = (async () => {
      if (old) await this.#timed('runtime stop', cause, () => stopStarted(old));
      return this.#timed('runtime start', cause, () => this.#startRuntime(cause));
    })().finally(() => {
      if (this.#starting?.done === done) this.#starting = null;
    });
    this.#starting = { done, cause };
    return done;
  }

  async #startRuntime(cause: number): Promise<Runtime | null> {
    const status = (frame: Omit<StatusFrame, 'type'>) => this.#status(frame);
    const started = await startRuntime({ host: this.#host, deps: this.#deps, signal: this.#abort.signal, status });
    if (!started) return null;
    this.#mcpListed = true;
    this.#runtime = { ...started, cause };
    started.process.onExit((exit) => void this.#runtimeDied(started.process, exit.code, exit.signal));
    await progress({ host: this.#host, status }, 'connected');
    return started.process;
  }

  /** Records a runtime's death once: status frame, then `runtime_status disconnected` (the machine goes to error). */
  #runtimeDied(runtime: Runtime, code: number | null, signal: string | null): Promise<unknown> {
    if (this.#runtime?.process !== runtime) return this.#death ?? Promise.resolve();
    // Its MCP servers stop with it; a reconnect starts them again with the new runtime.
    void this.#runtime.mcp?.close();
    this.#runtime = null;
    const message = `the runtime exited (${signal ? `signal ${signal}` : `code ${code}`})`;
    if (this.#deps.logger.isDebug)
      this.#deps.logger.debug('runtime lost', { conversation_id: this.#host.conversationId, message });
    this.#status(STATUS.failed);
    this.#death = this.#host.decide({ type: 'runtime_lost', message }).catch((err: unknown) => this.#dropped(err));
    return this.#death;
  }

  /**
   * Runs command `cause` in the runtime the session wants; its output goes to
   * the decider. `signal` interrupts it (SIGINT to its process group, SIGKILL
   * after the runtime's grace period): its output is then not stored (the
   * decision that cut it stored the command's result).
   */
  async #runCommand(cause: number, command: string, signal: AbortSignal): Promise<string> {
    const runtime = await this.#runtimeFor({ type: 'command_unavailable', cause, command }, signal);
    if (typeof runtime === 'string') return runtime;
    try {
      const result = await runtime.run(command, { timeoutMs: this.#deps.commandTimeoutMs, signal });
      if (signal.aborted) return 'aborted';
      await this.#host.decide({ type: 'command_finished', cause, command, result });
      return result.timed_out ? 'timed out' : `exit code ${result.exit_code}`;
    } catch (err) {
      // A runtime that died under the command: its death is stored first, so the machine has left the
      // agent loop before it sees this output (the state then no longer asks for the command, but
      // the command still gets its result).
      if (!runtime.alive) await this.#runtimeDied(runtime, null, null);
      else if (signal.aborted) return 'aborted';
      const why = runtime.alive ? String(errorFields(err).error) : 'the runtime exited';
      await this.#host.decide({ type: 'command_unavailable', cause, command, why });
      return 'runtime unavailable';
    }
  }

  /**
   * The runtime a command or a tool call runs in; or, when there is none, how
   * it ended (its result stored as unavailable, or aborted). A runtime that
   * died is not replaced behind the user's back: its death is stored first (it
   * may be on its way, or come while we wait), then the log says whether it is lost.
   */
  async #runtimeFor(
    unavailable: Omit<Extract<DecisionInput, { type: 'command_unavailable' }>, 'why'>,
    signal: AbortSignal,
  ): Promise<Runtime | string> {
    for (let death = this.#death; ; death = this.#death) {
      await death;
      if (death === this.#death) break;
    }
    const lost = this.#host.runtimeLost();
    if (lost !== null) {
      await this.#host.decide({ ...unavailable, why: lost });
      return 'runtime unavailable';
    }
    const runtime = await this.#ensureRuntime(this.#host.runtimeCause());
    if (signal.aborted) return 'aborted';
    if (!runtime) {
      await this.#host.decide({ ...unavailable, why: 'it could not be started' });
      return 'no runtime';
    }
    return runtime;
  }

  /** Makes tool call `cause` on the runtime's workspace (and its MCP servers); its result goes to the decider. */
  async #callTool(effect: Extract<Effect, { type: 'call_tool' }>, signal: AbortSignal): Promise<string> {
    const { cause, callId, tool } = effect;
    const unavailable = { type: 'command_unavailable' as const, cause, command: tool, callId, tool };
    const runtime = await this.#runtimeFor(unavailable, signal);
    if (typeof runtime === 'string') return runtime;
    const mcp = this.#runtime?.process === runtime ? this.#runtime.mcp : null;
    let result;
    try {
      result = await callTool(effect, { workspace: runtime.workspace, mcp }, signal);
    } catch (err) {
      if (signal.aborted) return 'aborted';
      throw err;
    }
    if (signal.aborted) return 'aborted';
    // A server that died, timed out or never started: the clients see it at once, the model in the result.
    if (result.failed) this.#status({ level: 'warning', id: 'STATUS$MCP_SERVER', message: result.output });
    const { output, isError } = result;
    await this.#host.decide({ type: 'tool_finished', cause, callId, tool, output, isError });
    return isError ? 'error' : 'done';
  }
}
