import type { AgentState, DoubleTexting, RuntimeStatus } from '../protocol/index.ts';

/**
 * Bump when a change to `machines/` changes what a stored log means or what a
 * persisted snapshot holds. Old logs always fold: see `upcasters.ts`, and the
 * version table in test/machines/machineVersion.unit.test.ts.
 */
export const SESSION_MACHINE_VERSION = 10;

/** The version of logs written before `conversation_created` recorded one. */
export const UNRECORDED_MACHINE_VERSION = 3;

/**
 * Rate-limited steps tried again before the agent gives up in error, when
 * `conversation_created` records no `max_rate_limit_retries` (logs written
 * before the field existed, which so fold as they did).
 */
export const DEFAULT_RATE_LIMIT_RETRIES = 5;

/**
 * Attempts of one step when `conversation_created` records no `max_attempts`:
 * the one try and three retries the LLM agent made inside a step of a failing
 * server before attempts were stored.
 */
export const LEGACY_MAX_ATTEMPTS = 4;

export interface SessionInput {
  conversationId: string;
  user: string;
  maxIterations: number;
  /** USD the agent may spend on LLM calls, or null for no limit. */
  maxBudget: number | null;
  maxRateLimitRetries: number;
  /**
   * Attempts one step may take (counted ones: not a resumption after a
   * passivation or in a fork), or null when the log records none (a rate-limited
   * step is then a new step, as before attempts were stored).
   */
  maxAttempts: number | null;
  confirmationMode: boolean;
  /** What a user message does while the agent works (read by the decider; absent from logs before it: enqueue). */
  doubleTexting: DoubleTexting;
  /** Epoch ms by which the session must have started, or null for no limit. */
  startDeadline: number | null;
  /** The repository the workspace is cloned from (`conversation_created.repository`), or null. */
  repository?: { url: string; branch?: string; tokenSecret?: string } | null;
  /** The machine version the log was written under so far (default: this one). */
  machineVersion?: number;
}

export interface PendingCommand {
  eventId: number;
  source: 'user' | 'agent';
  /** The shell command; for a tool call (`tool`), the tool's name. */
  command: string;
  /** A tool call other than a shell command (`tool_call`): its tool and arguments. */
  tool?: { name: string; arguments: Record<string, unknown> };
  /** The model's id of the call (an agent's call of machine version 10 and later). */
  callId?: string;
  /** In confirmation mode it waits for the user (stored with the call). */
  needsConfirmation?: boolean;
  /** The step whose reply made it, and its attempt: the reply's later calls name the same. */
  step?: number;
  attempt?: number;
  /**
   * The session came back into memory while this command was out: whatever ran
   * it died with the old process. It is reported as interrupted, never run again.
   */
  interrupted?: true;
  /** It was sent while the runtime was lost (a reconnect came after): it fails, never runs late. */
  lost?: string;
  /**
   * The agent chose it while a pause was asked: it waits, not started, for the
   * agent to resume (a passivation or a crash leaves it to run then).
   */
  held?: true;
}

const COMING_UP: ReadonlySet<RuntimeStatus> = new Set(['reconnecting', 'starting', 'connecting', 'setting_up']);

/** A runtime is being brought up (created, reconnected), not yet connected nor lost. */
export function isComingUp(runtime: RuntimeStatus): boolean {
  return COMING_UP.has(runtime);
}

/** A deadline is data, so it survives snapshots and is armed again after rehydration. */
export interface Deadline {
  name: 'start' | 'retry';
  at: number;
}

/**
 * A conversation's repository and how far its workspace has come: to clone,
 * failed (`repository_clone_failed`: commands fail at once, nothing clones
 * again until a `reconnect_runtime`), cloned (`repository_cloned`), ready (its
 * instruction files read: `instructions_loaded`).
 */
export interface RepositoryProgress {
  url: string;
  branch?: string;
  /** The name of the secret holding the token. */
  tokenSecret?: string;
  status: 'to_clone' | 'failed' | 'cloned' | 'ready';
  /** Why the last clone failed, while `failed`. */
  failure?: string;
}

export interface SessionContext extends Omit<SessionInput, 'machineVersion' | 'repository'> {
  machineVersion: number;
  /** Null without a repository. */
  repository: RepositoryProgress | null;
  /** Agent steps taken so far. */
  iterations: number;
  /** USD spent on LLM calls so far. */
  spent: number;
  /** The allowance a user message grants again once a limit is reached. */
  iterationBudget: number;
  budget: number | null;
  /** Rate-limited attempts of the current step. */
  rateLimits: number;
  /** The current step's attempt, from 1 (its `agent_attempt` events count it up). */
  attempt: number;
  /** The current step's attempts that count against `maxAttempts`. */
  attemptsCounted: number;
  /** A user message the agent has not been asked about yet. */
  unreadMessage: boolean;
  /** id of the newest user message. */
  lastMessageId: number | null;
  /** id of the event that started the current agent step: its answer must carry it as `cause`. */
  stepCause: number | null;
  /**
   * The step an interrupt or a stop just cut (its `stepCause`), whose partial
   * message (`interrupted: true`) the same decision may still store; null otherwise.
   */
  cutStep: number | null;
  /** A user asked to pause while the agent works: it pauses once the step answers or the command finishes. */
  pausing: boolean;
  pendingCommand: PendingCommand | null;
  /**
   * The calls of the same reply after `pendingCommand`, in order: each runs
   * (or waits for confirmation) once the one before it has its result.
   */
  queuedCalls: PendingCommand[];
  /** Why the agent is in error, when it is. */
  error: string | null;
  runtime: RuntimeStatus;
  /** id of the event that asked for the current runtime: 0 (creation) or a `reconnect_runtime`. */
  runtimeCause: number;
  /** Why the runtime died, until a reconnect replaces it: commands then fail at once. */
  runtimeLost: string | null;
  /** Epoch ms (a stored event's `ts`) since which the agent is running; null when it is not. */
  runningSince: number | null;
  deadline: Deadline | null;
  /** The agent state to come back to, while passivated. */
  resumeState: AgentState | null;
  /** The conversation (and stream sequence in its log) this one was forked from, or null. */
  forkedFrom: { conversationId: string; seq: number } | null;
}

const NO_INPUT: SessionInput = {
  conversationId: '',
  user: '',
  maxIterations: 0,
  maxBudget: null,
  maxRateLimitRetries: 0,
  maxAttempts: null,
  confirmationMode: false,
  doubleTexting: 'enqueue',
  startDeadline: null,
  machineVersion: SESSION_MACHINE_VERSION,
};

/**
 * A new conversation's context. xstate's pure `transition()` and
 * `initialTransition()` build a throw-away actor without input for every call:
 * they get a context instead of a TypeError. Real actors always get an input.
 */
export function initialContext(input: SessionInput | undefined): SessionContext {
  const given = input ?? NO_INPUT;
  return {
    ...given,
    machineVersion: given.machineVersion ?? SESSION_MACHINE_VERSION,
    repository: given.repository ? { ...given.repository, status: 'to_clone' } : null,
    iterationBudget: given.maxIterations,
    budget: given.maxBudget,
    iterations: 0,
    spent: 0,
    rateLimits: 0,
    attempt: 1,
    attemptsCounted: 1,
    unreadMessage: false,
    lastMessageId: null,
    stepCause: null,
    cutStep: null,
    pausing: false,
    pendingCommand: null,
    queuedCalls: [],
    error: null,
    runtime: 'stopped',
    runtimeCause: 0,
    runtimeLost: null,
    runningSince: null,
    deadline: given.startDeadline === null ? null : { name: 'start', at: given.startDeadline },
    resumeState: null,
    forkedFrom: null,
  };
}
