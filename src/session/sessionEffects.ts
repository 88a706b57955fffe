import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Deadline, PendingCommand, SessionSnapshot } from '../../machines/index.ts';
import {
  LlmAuthenticationError,
  LlmRateLimitError,
  rateCommand,
  type Agent,
  type AgentAction,
} from '../agent/index.ts';
import { TetherError } from '../errors.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { NewEvent, StatusFrame, StoredEvent } from '../protocol/index.ts';
import type { CommandResult, Runtime, RuntimeProvider } from '../runtime/index.ts';
import type { EventLog } from '../store/index.ts';
import type { ConversationFeed } from './conversationFeed.ts';
import { IllegalTransitionError, SessionClosedError } from './errors.ts';

export interface SessionEffectDeps {
  log: EventLog;
  feed: ConversationFeed;
  agent: Agent;
  runtimes: RuntimeProvider;
  clock: () => Date;
  logger: Logger;
  /** Given to the runtime's environment; never stored. */
  secrets: Record<string, string>;
  commandTimeoutMs?: number;
}

/** The part of a session that effects talk back to. */
export interface EffectHost {
  readonly conversationId: string;
  readonly closed: boolean;
  history(): Promise<readonly StoredEvent[]>;
  submit(event: NewEvent): Promise<unknown>;
}

const DEADLINE_MESSAGES: Record<Deadline['name'], string> = {
  start: 'the session did not finish starting in time',
  retry: 'the rate-limit wait is over; trying the step again',
};

/** A workspace's own set-up script, relative to the workspace. */
export const SETUP_SCRIPT = '.tether/setup.sh';

const STATUS = {
  starting: { level: 'info', id: 'STATUS$STARTING_RUNTIME', message: 'Starting the runtime...' },
  connecting: { level: 'info', id: 'STATUS$CONNECTING_RUNTIME', message: 'Connecting to the runtime...' },
  settingUp: { level: 'info', id: 'STATUS$SETTING_UP_WORKSPACE', message: 'Setting up the workspace...' },
  connected: { level: 'info', id: 'STATUS$RUNTIME_CONNECTED', message: 'The runtime is ready.' },
  failed: { level: 'error', id: 'STATUS$ERROR_RUNTIME_DISCONNECTED', message: 'The runtime is not available.' },
  llmAuthentication: { level: 'error', id: 'STATUS$ERROR_LLM_AUTHENTICATION', message: 'The LLM refused the API key.' },
  rateLimited: {
    level: 'warning',
    id: 'STATUS$LLM_RATE_LIMITED',
    message: 'The LLM is rate limiting; the step is tried again shortly.',
  },
} as const satisfies Record<string, Omit<StatusFrame, 'type'>>;

/**
 * The effects a session's machine asks for, run by the host: start the
 * runtime, ask the agent, run a command. Their results re-enter the session
 * through `submit`, so they are stored before they take effect, and a result
 * the machine no longer wants (a stale step) is refused and dropped.
 */
export class SessionEffects {
  readonly #host: EffectHost;
  readonly #deps: SessionEffectDeps;
  readonly #abort = new AbortController();
  #runtime: Runtime | null = null;
  #starting: Promise<Runtime | null> | null = null;
  /** Why the runtime is down, once it died: commands then fail at once until a reconnect. */
  #lost: string | null = null;
  #death: Promise<void> | null = null;

  constructor(host: EffectHost, deps: SessionEffectDeps) {
    this.#host = host;
    this.#deps = deps;
  }

  /** The machine's `startRuntime` action, asked for by event `cause`. Each action only schedules work. */
  startRuntime(cause: number): void {
    this.#spawn(() => this.#ensureRuntime(cause));
  }

  /** The machine's `askAgent` action. */
  askAgent(context: SessionSnapshot['context']): void {
    const cause = context.stepCause;
    if (cause !== null) this.#spawn(() => this.#effect('agent step', cause, () => this.#askAgent(cause)));
  }

  /** The machine's `runCommand` action. */
  runCommand(context: SessionSnapshot['context']): void {
    const pending = context.pendingCommand;
    if (pending) {
      const { eventId, command } = pending;
      this.#spawn(() => this.#effect('command', eventId, () => this.#runCommand(eventId, command)));
    }
  }

  /**
   * Starts again what a restored session was waiting for. A command that was
   * running when the process died is reported as interrupted, never run twice.
   */
  resume(snapshot: SessionSnapshot): void {
    if (snapshot.matches('starting')) this.#spawn(() => this.#ensureRuntime('rehydrated'));
    else if (snapshot.matches({ active: { running: 'thinking' } }) && snapshot.context.stepCause !== null) {
      const cause = snapshot.context.stepCause;
      this.#spawn(() => this.#effect('agent step', cause, () => this.#askAgent(cause)));
    }
    const pending = snapshot.context.pendingCommand;
    if (pending && snapshot.matches({ active: { running: 'executing' } })) {
      this.#spawn(() =>
        this.#host.submit(this.interrupted(pending, 'the server stopped before this command finished')),
      );
    }
  }

  /** The observation for a command that will never report: it is not run again. */
  interrupted(pending: PendingCommand, why: string): NewEvent {
    return {
      source: 'environment',
      type: 'command_output',
      data: {
        command: pending.command,
        exit_code: null,
        output: `interrupted: ${why}; it was not run again`,
        timed_out: false,
        truncated: false,
      },
      cause: pending.eventId,
    };
  }

  /** A deadline in the session's context passed: store it, and the machine decides what it means. */
  deadlinePassed(deadline: Deadline): void {
    this.#spawn(() =>
      this.#host.submit({
        source: 'environment',
        type: 'timeout',
        data: { deadline: deadline.name, message: DEADLINE_MESSAGES[deadline.name] },
      }),
    );
  }

  /**
   * Replaces the runtime with a fresh one in the same workspace (a page
   * refresh, `reconnect_runtime`, a REST call): the old agent loop is already
   * closed by the machine, which returns to awaiting_user_input once connected.
   */
  async reconnect(): Promise<void> {
    if (this.#abort.signal.aborted) return;
    await this.#starting;
    const old = this.#runtime;
    this.#runtime = null;
    if (old) await this.#effect('runtime stop', 'reconnect', () => old.stop());
    await this.#host.submit({ source: 'environment', type: 'runtime_status', data: { status: 'reconnecting' } });
    this.#lost = null;
    await this.#ensureRuntime('reconnect');
  }

  /** True once the runtime died and nothing replaced it yet. */
  get runtimeLost(): boolean {
    return this.#lost !== null;
  }

  /** Stops every effect and the runtime; `why` names the cause in debug lines. */
  async stop(why: string): Promise<void> {
    this.#abort.abort();
    const runtime = this.#runtime;
    this.#runtime = null;
    if (runtime) await this.#effect('runtime stop', why, () => runtime.stop());
  }

  #spawn(work: () => Promise<unknown>): void {
    void Promise.resolve()
      .then(work)
      .catch((err) => {
        if (err instanceof IllegalTransitionError || err instanceof SessionClosedError) {
          // Expected after a stop or a close: the result of an abandoned effect is refused.
          this.#deps.logger.info('effect result dropped', {
            conversation_id: this.#host.conversationId,
            reason: err.message,
          });
          return;
        }
        this.#deps.logger.error('session effect failed', {
          conversation_id: this.#host.conversationId,
          ...errorFields(err),
        });
      });
  }

  /**
   * Runs one effect. At debug level its start and its end are logged with the
   * conversation, the cause (the id of the stored event that asked for it, or
   * why it runs) and how it ended (`outcome`, or the string the work returns);
   * at other levels this costs nothing more.
   */
  async #effect<T>(
    effect: 'agent step' | 'command' | 'runtime start' | 'runtime stop',
    cause: number | string,
    work: () => Promise<T>,
    outcome: (result: T) => string = (result) => (typeof result === 'string' ? result : 'done'),
  ): Promise<T> {
    const logger = this.#deps.logger;
    if (!logger.isDebug) return work();
    const fields = { conversation_id: this.#host.conversationId, effect, cause };
    logger.debug('effect started', fields);
    const started = performance.now();
    const ms = () => Math.round(performance.now() - started);
    try {
      const result = await work();
      logger.debug('effect finished', { ...fields, outcome: outcome(result), ms: ms() });
      return result;
    } catch (err) {
      logger.debug('effect failed', { ...fields, ...errorFields(err), ms: ms() });
      throw err;
    }
  }

  #status(frame: Omit<StatusFrame, 'type'>): void {
    this.#deps.feed.publishStatus(this.#host.conversationId, { type: 'status', ...frame });
  }

  /** The live runtime, starting one (and storing its status) when there is none. */
  #ensureRuntime(cause: number | string): Promise<Runtime | null> {
    if (this.#runtime?.alive) return Promise.resolve(this.#runtime);
    this.#starting ??= this.#effect(
      'runtime start',
      cause,
      () => this.#startRuntime(),
      (runtime) => (runtime ? 'connected' : 'not started'),
    ).finally(() => {
      this.#starting = null;
    });
    return this.#starting;
  }

  async #startRuntime(): Promise<Runtime | null> {
    if (this.#abort.signal.aborted) return null;
    await this.#step('starting', STATUS.starting);
    const runtime = this.#deps.runtimes.create(this.#host.conversationId, { env: this.#deps.secrets });
    try {
      await this.#step('connecting', STATUS.connecting);
      await runtime.start();
      if (this.#abort.signal.aborted) throw new Error('the session is closing');
      await this.#step('setting_up', STATUS.settingUp);
      await this.#setUpWorkspace(runtime);
    } catch (err) {
      await runtime.stop();
      if (this.#abort.signal.aborted) return null;
      this.#status(STATUS.failed);
      const message = `the runtime failed to start: ${errorFields(err).error}`;
      await this.#host.submit({
        source: 'environment',
        type: 'runtime_status',
        data: { status: 'disconnected', message },
      });
      return null;
    }
    this.#runtime = runtime;
    runtime.onExit((exit) => this.#spawn(() => this.#runtimeDied(runtime, exit.code, exit.signal)));
    await this.#step('connected', STATUS.connected);
    return runtime;
  }

  /**
   * Runs the workspace's own set-up script, `.tether/setup.sh`, when there is
   * one, each time a runtime starts there (so also after a reconnect). A
   * failing script fails the start, with its exit code and the end of its output.
   */
  async #setUpWorkspace(runtime: Runtime): Promise<void> {
    if (!existsSync(join(runtime.workspace, SETUP_SCRIPT))) return;
    const result = await runtime.run(`bash ${SETUP_SCRIPT}`, {
      timeoutMs: this.#deps.commandTimeoutMs,
      signal: this.#abort.signal,
    });
    if (result.exit_code === 0) return;
    const how = result.timed_out ? 'timed out' : `exit ${result.exit_code}`;
    throw new Error(`the workspace set-up script ${SETUP_SCRIPT} failed (${how}): ${result.output.slice(-500)}`);
  }

  /** One step of a runtime's start: a stored status and a transient status frame. */
  async #step(
    status: 'starting' | 'connecting' | 'setting_up' | 'connected',
    frame: Omit<StatusFrame, 'type'>,
  ): Promise<void> {
    await this.#host.submit({ source: 'environment', type: 'runtime_status', data: { status } });
    this.#status(frame);
  }

  /** Records a runtime's death once: status frame, then `runtime_status disconnected` (the machine goes to error). */
  #runtimeDied(runtime: Runtime, code: number | null, signal: string | null): Promise<void> {
    if (this.#runtime !== runtime) return this.#death ?? Promise.resolve();
    this.#runtime = null;
    const message = `the runtime exited (${signal ? `signal ${signal}` : `code ${code}`})`;
    if (this.#deps.logger.isDebug)
      this.#deps.logger.debug('runtime lost', { conversation_id: this.#host.conversationId, message });
    this.#lost = message;
    this.#status(STATUS.failed);
    this.#death = this.#host
      .submit({ source: 'environment', type: 'runtime_status', data: { status: 'disconnected', message } })
      .then(() => undefined);
    return this.#death;
  }

  /** One agent step answering event `cause`; submits its answer (or its failure) and says which. */
  async #askAgent(cause: number): Promise<string> {
    let action: AgentAction;
    try {
      action = await this.#deps.agent.step({
        conversationId: this.#host.conversationId,
        history: await this.#host.history(),
        signal: this.#abort.signal,
      });
    } catch (err) {
      if (this.#abort.signal.aborted) return 'aborted';
      const failure = this.#agentFailure(err, cause);
      await this.#host.submit(failure);
      return failure.type;
    }
    if (this.#abort.signal.aborted) return 'aborted';
    if (action.usage) await this.#host.submit({ source: 'agent', type: 'agent_usage', data: action.usage });
    const answer = agentEvent(action, cause);
    await this.#host.submit(answer);
    return answer.type;
  }

  /**
   * A failed step as a stored fact. A rate limit carries when to try again
   * (the machine waits in rate_limited, then retries, up to its limit); a bad
   * key tells the clients; anything else puts the agent in error with the reason.
   */
  #agentFailure(err: unknown, cause: number): NewEvent {
    const code = err instanceof TetherError ? err.code : 'AGENT_FAILED';
    const message = `the agent failed: ${errorFields(err).error}`;
    if (err instanceof LlmRateLimitError) {
      const retryAt = new Date(this.#deps.clock().getTime() + err.retryAfterMs).toISOString();
      this.#status(STATUS.rateLimited);
      return { source: 'agent', type: 'agent_error', data: { code, message, retry_at: retryAt }, cause };
    }
    if (err instanceof LlmAuthenticationError) this.#status(STATUS.llmAuthentication);
    return { source: 'agent', type: 'agent_error', data: { code, message }, cause };
  }

  /** Runs command `commandId`; submits its output as an observation and says how it ended. */
  async #runCommand(commandId: number, command: string): Promise<string> {
    // A runtime that died is not restarted behind the user's back: the command
    // fails at once with a clear observation until a reconnect.
    const runtime = this.#lost === null ? await this.#ensureRuntime(commandId) : null;
    let result: CommandResult;
    if (!runtime) {
      result = unavailable(this.#lost ?? 'it could not be started');
    } else {
      try {
        result = await runtime.run(command, { timeoutMs: this.#deps.commandTimeoutMs, signal: this.#abort.signal });
      } catch (err) {
        if (this.#abort.signal.aborted) return 'aborted';
        // The death is stored first, so the machine has left the agent loop before it sees this output.
        if (!runtime.alive) await this.#runtimeDied(runtime, null, null);
        result = unavailable(this.#lost ?? String(errorFields(err).error));
      }
    }
    if (this.#abort.signal.aborted) return 'aborted';
    await this.#report(commandId, command, result);
    return result.timed_out ? 'timed out' : `exit code ${result.exit_code}`;
  }

  #report(commandId: number, command: string, result: CommandResult): Promise<unknown> {
    return this.#host.submit({
      source: 'environment',
      type: 'command_output',
      data: { command, ...result },
      cause: commandId,
    });
  }
}

function unavailable(why: string): CommandResult {
  return {
    exit_code: null,
    output: `the runtime is not available (${why}); the command did not run to completion. Reconnect (refresh the page, or send reconnect_runtime) to start a new runtime in the same workspace.`,
    timed_out: false,
    truncated: false,
  };
}

function agentEvent(action: AgentAction, cause: number): NewEvent {
  switch (action.type) {
    case 'message':
      return {
        source: 'agent',
        type: 'message',
        data:
          action.waitForResponse === false
            ? { content: action.content, wait_for_response: false }
            : { content: action.content },
        cause,
      };
    case 'run':
      return {
        source: 'agent',
        type: 'command',
        data: { command: action.command, risk: rateCommand(action.command) },
        cause,
      };
    case 'finish':
      return { source: 'agent', type: 'finish', data: { content: action.content }, cause };
  }
}
