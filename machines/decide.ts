import type {
  AgentState,
  AttemptReason,
  EventOf,
  NewEvent,
  PassivationReason,
  SecurityRisk,
  StoredEvent,
  UserAction,
} from '../protocol/index.ts';
import type { Deadline } from './sessionContext.ts';
import { SESSION_MACHINE_VERSION } from './sessionContext.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
import { agentStateOf } from './agentState.ts';
import type { SessionSnapshot } from './sessionMachine.ts';
import { inputFrom } from './input.ts';
import { initialSnapshot, nextSnapshot } from './step.ts';
import {
  agentWorks,
  ATTEMPT_MESSAGES,
  commandOutput,
  interrupted,
  nextAttempt,
  repositoryProposals,
  unavailableResult,
  userProposals,
  type CommandResult,
  type Proposal,
} from './proposals.ts';
import { agentEvents, callInput, callOf, queuedResults, toolResult } from './calls.ts';

type CreatedData = Omit<EventOf<'conversation_created'>['data'], 'machine_version'>;

/**
 * The stored event envelope's version (protocol/event.ts `EVENT_VERSION`), typed by
 * the protocol so that a new envelope version fails the type check here. A copy,
 * not an import: machines/ imports protocol types only, or its zod schemas would
 * follow into every browser bundle of the machines.
 */
const EVENT_VERSION: StoredEvent['v'] = 1;

/**
 * What an agent step produced (the host rates a command's risk before it asks);
 * `thought` is the text streamed with a tool call.
 */
export type AgentAnswer = (
  | { type: 'message'; content: string; waitForResponse?: false; callId?: string }
  /** One shell command, waiting in confirmation mode when `risk` is high (no call id, no model rating). */
  | { type: 'run'; command: string; risk: 'low' | 'high' }
  /** The tool calls of one reply, in order: stored together, each run once the one before has its result. */
  | { type: 'calls'; calls: AnswerCall[] }
  | { type: 'finish'; content: string; callId?: string }
) & { thought?: string };

/** One tool call of a reply, rated by the host: a shell command, or another tool. */
/**
 * One tool call of a reply, with its two ratings: the rules' (`risk`) and the
 * model's (`securityRisk`; none for a call that does not act, which never waits).
 */
export type AnswerCall = { risk: 'low' | 'high'; securityRisk?: SecurityRisk } &
  /** No `callId`: a command that is not a model's (a scripted or replayed agent's). */
  ({ command: string; callId?: string } | { tool: string; arguments: Record<string, unknown>; callId: string });

/**
 * What the current step's attempt has streamed so far (its deltas joined, as
 * masked), given with a user action that may cut the step: an interrupt, a
 * stop, or a message under `double_texting: interrupt`.
 */
export interface Streamed {
  itemId: string;
  attempt: number;
  text: string;
  deltas: number;
}

/** One input to the decider: a user action, an effect's result, a deadline, or a lifecycle step of the host. */
export type DecisionInput =
  | { type: 'create'; conversationId: string; data: CreatedData }
  | { type: 'user_action'; action: UserAction; streamed?: Streamed }
  | { type: 'runtime_progress'; status: 'starting' | 'connecting' | 'setting_up' | 'connected' }
  | { type: 'runtime_lost'; message: string }
  /** The workspace's repository (`context.repository`) was cloned, or could not be; then its instruction files read. */
  | { type: 'repository_cloned'; branch: string; commit: string }
  | { type: 'clone_failed'; message: string }
  | { type: 'instructions_loaded'; files: EventOf<'instructions_loaded'>['data']['files'] }
  | { type: 'agent_used'; usage: EventOf<'agent_usage'>['data'] }
  /**
   * A step's answer, by its `attempt`, after `deltas` delta frames (0 when it did not stream).
   * `confirmUnknown` (TETHER_CONFIRM_UNKNOWN, default true): an unrated call needs confirmation.
   */
  | {
      type: 'agent_answered';
      cause: number;
      answer: AgentAnswer;
      attempt?: number;
      deltas?: number;
      confirmUnknown?: boolean;
    }
  /** Attempt `attempt` of step `cause` failed in a way another attempt may not: the next one, or error past the bound. */
  | { type: 'agent_retry'; cause: number; attempt: number; reason: AttemptReason; code: string; message: string }
  | { type: 'agent_failed'; cause: number; code: string; message: string; retryAt?: string }
  | { type: 'command_finished'; cause: number; command: string; result: CommandResult }
  /** Tool call `cause` answered (a tool's error is a result too). */
  | { type: 'tool_finished'; cause: number; callId: string; tool: string; output: string; isError: boolean }
  /** The MCP servers' tools, listed when a runtime started: stored only when they differ from the last listed. */
  | { type: 'tools_listed'; servers: EventOf<'tools_listed'>['data']['servers'] }
  /** `callId` and `tool` name a tool call (none: a shell command). */
  | { type: 'command_interrupted'; cause: number; command: string; why: string; callId?: string; tool?: string }
  | { type: 'command_unavailable'; cause: number; command: string; why: string; callId?: string; tool?: string }
  | { type: 'deadline'; name: Deadline['name'] }
  | { type: 'passivate'; reason: PassivationReason }
  | { type: 'rehydrate'; from: 'snapshot' | 'log'; folded: number; recordedState?: AgentState }
  /** A fork's first decision, on the parent's copied events: where it came from, then back as after a crash. */
  | { type: 'fork'; parent: string; seq: number; folded: number; recordedState?: AgentState }
  | { type: 'close'; reason: string };

export type RefusalCode = 'ILLEGAL_TRANSITION' | 'NOT_STARTED' | 'ENDED' | 'AGENT_BUSY';

export type Decision =
  | { ok: true; events: StoredEvent[]; snapshot: SessionSnapshot }
  | { ok: false; code: RefusalCode; reason: string; state: AgentState };

/** What the decider is given besides the state: the next event id and the time (rule 4: nothing is read). */
export interface DecisionStamp {
  conversationId: string;
  nextEventId: number;
  now: Date;
}

const DEADLINE_MESSAGES: Record<Deadline['name'], string> = {
  start: 'the session did not finish starting in time',
  retry: 'the rate-limit wait is over; trying the step again',
};

/**
 * The one decider. Given the current snapshot and one input it says which
 * events to store, each checked by the statechart and followed by the
 * `agent_state_changed` fact it leads to, or refuses with a reason and a code
 * (nothing stored). Pure: the host appends the events in order and applies
 * each once JetStream acknowledged it; `snapshot` is where they lead.
 */
export function decide(snapshot: SessionSnapshot | undefined, input: DecisionInput, stamp: DecisionStamp): Decision {
  if (input.type === 'create') return create(input, stamp);
  if (!snapshot) return refuse('NOT_STARTED', 'the conversation has not been created', 'loading');
  if (snapshot.status !== 'active') return refuse('ENDED', 'the conversation has ended', agentStateOf(snapshot));
  const busy = busyRefusal(snapshot, input);
  if (busy) return busy;
  const proposals = proposalsFor(snapshot, input);
  if (proposals.length === 0) {
    return refuse('ILLEGAL_TRANSITION', `${input.type} does not answer the current step`, agentStateOf(snapshot));
  }
  const events: StoredEvent[] = [];
  let current: SessionSnapshot = snapshot;
  let nextId = stamp.nextEventId;
  const at = stamp.now.toISOString();
  /** Stores each proposal in turn; a group's state fact waits for its last event. Returns a refusal, or null. */
  const store = (list: readonly Proposal[], inGroup: boolean): Decision | null => {
    for (const proposal of list) {
      if (typeof proposal === 'object' && 'together' in proposal) {
        const before = current;
        const firstId = nextId;
        const refused = store(proposal.together, true);
        if (refused) return refused;
        const fact = stateFact(before, current);
        if (fact) events.push(stamped({ ...fact, cause: firstId }, nextId++, at, stamp));
        continue;
      }
      const proposed = typeof proposal === 'function' ? proposal(current) : proposal;
      if (proposed === null) continue;
      const event = stamped(proposed, nextId++, at, stamp);
      const machineEvent = toSessionEvent(event);
      if (machineEvent && !current.can(machineEvent)) {
        const state = agentStateOf(current);
        return refuse('ILLEGAL_TRANSITION', `cannot ${describe(machineEvent)} while the agent is ${state}`, state);
      }
      events.push(event);
      if (!machineEvent) continue;
      const next = nextSnapshot(current, machineEvent);
      const fact = inGroup ? null : stateFact(current, next);
      if (fact) events.push(stamped({ ...fact, cause: event.id }, nextId++, at, stamp));
      current = next;
    }
    return null;
  };
  const refused = store(proposals, false);
  return refused ?? { ok: true, events, snapshot: current };
}

/** `double_texting: reject`: a message while the agent works is refused, and nothing is stored. */
function busyRefusal(snapshot: SessionSnapshot, input: DecisionInput): Decision | null {
  if (input.type !== 'user_action' || input.action.type !== 'message') return null;
  if (snapshot.context.doubleTexting !== 'reject' || !agentWorks(snapshot)) return null;
  const state = agentStateOf(snapshot);
  return refuse(
    'AGENT_BUSY',
    `the agent is busy (${state}) and this conversation rejects messages meanwhile (double_texting: reject): wait, or interrupt it first`,
    state,
  );
}

function create(input: Extract<DecisionInput, { type: 'create' }>, stamp: DecisionStamp): Decision {
  const created = stamped(
    { source: 'user', type: 'conversation_created', data: { ...input.data, machine_version: SESSION_MACHINE_VERSION } },
    stamp.nextEventId,
    stamp.now.toISOString(),
    { ...stamp, conversationId: input.conversationId },
  ) as EventOf<'conversation_created'>;
  return { ok: true, events: [created], snapshot: initialSnapshot(inputFrom(created)) };
}

function proposalsFor(snapshot: SessionSnapshot, input: Exclude<DecisionInput, { type: 'create' }>): Proposal[] {
  const env = 'environment' as const;
  switch (input.type) {
    case 'user_action':
      return userProposals(snapshot, input.action, input.streamed);
    case 'runtime_progress':
      return [{ source: env, type: 'runtime_status', data: { status: input.status } }];
    case 'runtime_lost':
      return [
        { source: env, type: 'runtime_status', data: { status: 'disconnected', message: input.message } },
        ...lostCalls(snapshot, input.message),
      ];
    case 'repository_cloned':
    case 'clone_failed':
    case 'instructions_loaded':
      return repositoryProposals(snapshot, input);
    // What an LLM call used is stored apart, before its answer, so it counts even when the answer is stale.
    case 'agent_used':
      return [{ source: 'agent', type: 'agent_usage', data: input.usage }];
    case 'agent_answered':
      // Only the current step's current attempt: a late reply's later calls must not join the calls out.
      if (input.cause !== snapshot.context.stepCause) return [];
      if (input.attempt !== undefined && input.attempt !== snapshot.context.attempt) return [];
      return agentEvents(
        input.answer,
        { cause: input.cause, attempt: input.attempt ?? snapshot.context.attempt, deltas: input.deltas ?? 0 },
        input.confirmUnknown ?? true,
      );
    case 'agent_retry': {
      const { stepCause, attempt } = snapshot.context;
      if (input.cause !== stepCause || input.attempt !== attempt) return [];
      return [nextAttempt(input.reason, input.message, input.code)];
    }
    case 'agent_failed': {
      const { code, message, retryAt, cause } = input;
      const data = retryAt === undefined ? { code, message } : { code, message, retry_at: retryAt };
      return [{ source: 'agent', type: 'agent_error', data, cause }];
    }
    case 'command_finished':
      return [commandOutput(input.cause, input.command, input.result, callOf(snapshot, input.cause))];
    case 'tool_finished': {
      const { cause, callId, tool, output, isError } = input;
      return [toolResult(cause, { call_id: callId, tool, output, is_error: isError })];
    }
    case 'tools_listed':
      return [{ source: env, type: 'tools_listed', data: { servers: input.servers } }];
    case 'command_interrupted':
      return [interrupted({ ...input, callId: input.callId ?? callOf(snapshot, input.cause) })];
    case 'command_unavailable':
      return [unavailableResult({ ...input, callId: input.callId ?? callOf(snapshot, input.cause) })];
    case 'deadline': {
      const timeout: NewEvent = {
        source: env,
        type: 'timeout',
        data: { deadline: input.name, message: DEADLINE_MESSAGES[input.name] },
      };
      // Under recorded attempts a rate-limited step outlives its wait: the timeout brings it back as its next attempt.
      const { stepCause, error } = snapshot.context;
      const retries = input.name === 'retry' && stepCause !== null && snapshot.matches({ active: 'rate_limited' });
      return retries ? [timeout, nextAttempt('rate_limited', error ?? 'rate limited', 'LLM_RATE_LIMITED')] : [timeout];
    }
    case 'passivate':
      return passivation(snapshot, input.reason);
    case 'rehydrate':
      return rehydration(snapshot, input);
    case 'fork':
      return [
        { source: 'environment', type: 'conversation_forked', data: { conversation_id: input.parent, seq: input.seq } },
        ...rehydration(snapshot, { from: 'log', folded: input.folded, recordedState: input.recordedState }, 'forked'),
      ];
    case 'close':
      return [{ source: env, type: 'session_closed', data: { reason: input.reason } }];
  }
}

/**
 * Leaving memory: a command still out is recorded as interrupted (one waiting
 * for confirmation, or held by a pause, never started: it stays pending), a runtime that was up is
 * recorded as stopped, then `session_passivated` with the state to come back in.
 */
function passivation(snapshot: SessionSnapshot, reason: PassivationReason): Proposal[] {
  const { pendingCommand, runtime } = snapshot.context;
  const out: Proposal[] = [];
  if (pendingCommand && !pendingCommand.held && !snapshot.matches({ active: 'awaiting_user_confirmation' })) {
    // The reply's later calls first: once the running one has its result, none may start.
    out.push(...queuedResults(snapshot, 'the session left memory before its turn'));
    out.push(interrupted(callInput(pendingCommand, 'the session left memory before this command finished')));
  }
  if (runtime !== 'stopped' && runtime !== 'disconnected') {
    out.push({ source: 'environment', type: 'runtime_status', data: { status: 'stopped' } });
  }
  out.push((current) => ({
    source: 'environment',
    type: 'session_passivated',
    data: { reason, state: agentStateOf(current) },
  }));
  return out;
}

/**
 * Coming back: the state fact a crash cut off (between an event and its fact)
 * is stored first; a log of an older machine version records the upgrade.
 */
function rehydration(
  snapshot: SessionSnapshot,
  input: Omit<Extract<DecisionInput, { type: 'rehydrate' }>, 'type'>,
  why?: AttemptReason,
): Proposal[] {
  const out: Proposal[] = [];
  const state = agentStateOf(snapshot);
  if (input.recordedState !== undefined && input.recordedState !== state) {
    out.push({ source: 'environment', type: 'agent_state_changed', data: { state } });
  }
  const from = snapshot.context.machineVersion;
  if (from < SESSION_MACHINE_VERSION) {
    out.push({ source: 'environment', type: 'machine_upgraded', data: { from, to: SESSION_MACHINE_VERSION } });
  }
  out.push({
    source: 'environment',
    type: 'session_rehydrated',
    data: { from: input.from, events_folded: input.folded },
  });
  // A step under way is asked again: its next attempt, counted when its owner died with it.
  const reason = why ?? (snapshot.matches('passivated') ? 'resumed' : 'owner_lost');
  const message = ATTEMPT_MESSAGES[reason];
  out.push((current) =>
    current.context.stepCause !== null && current.matches({ active: { running: 'thinking' } })
      ? nextAttempt(reason, message, 'AGENT_OWNER_LOST')(current)
      : null,
  );
  return out;
}

/**
 * What a lost runtime leaves of the calls: the one out, waiting for
 * confirmation or held by a pause is answered as unavailable (a tool call's
 * effect is cut, and nothing would bring back one that waits), then the
 * reply's later calls. A shell command out is left to its own report (its
 * output, or `command_unavailable`, follows the loss).
 */
function lostCalls(snapshot: SessionSnapshot, why: string): NewEvent[] {
  const { pendingCommand } = snapshot.context;
  const out: NewEvent[] = [];
  const running = snapshot.matches({ active: { running: 'executing' } }) && !pendingCommand?.tool;
  if (pendingCommand && !pendingCommand.interrupted && !running) {
    out.push(unavailableResult(callInput(pendingCommand, why)));
  }
  return [...out, ...queuedResults(snapshot, `the runtime was lost before its turn (${why})`)];
}

/** The `agent_state_changed` fact a transition leads to, or null when the agent state stayed. */
function stateFact(
  before: SessionSnapshot,
  after: SessionSnapshot,
): Extract<NewEvent, { type: 'agent_state_changed' }> | null {
  const state = agentStateOf(after);
  if (state === agentStateOf(before)) return null;
  const reason = state === 'error' || state === 'rate_limited' ? after.context.error : null;
  return { source: 'environment', type: 'agent_state_changed', data: reason ? { state, reason } : { state } };
}

/** What a user tried, in words, for an error that names the state which refused it. */
function describe(event: SessionEvent): string {
  switch (event.type) {
    case 'user.message':
      return 'send a message';
    case 'user.run':
      return 'run a command';
    case 'user.change_state':
      return `change the agent state to ${event.state}`;
    case 'user.reconnect_runtime':
      return 'reconnect the runtime (only in error, or after the runtime was lost)';
    case 'user.interrupt':
      return 'interrupt the agent (only while it is running or rate limited)';
    default:
      return `apply ${event.type}`;
  }
}

function stamped(event: NewEvent, id: number, ts: string, stamp: DecisionStamp): StoredEvent {
  const { source, type, cause, data } = event;
  // Envelope first, so the stored JSON reads in the order of the contract.
  return {
    v: EVENT_VERSION,
    id,
    conversation_id: stamp.conversationId,
    ts,
    source,
    type,
    ...(cause !== undefined && { cause }),
    data,
  } as StoredEvent;
}

function refuse(code: RefusalCode, reason: string, state: AgentState): Decision {
  return { ok: false, code, reason, state };
}
