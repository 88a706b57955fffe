import type { AgentState, EventOf, NewEvent, PassivationReason, StoredEvent, UserAction } from '../protocol/index.ts';
import type { Deadline } from './sessionContext.ts';
import { SESSION_MACHINE_VERSION } from './sessionContext.ts';
import { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
import { agentStateOf } from './agentState.ts';
import type { SessionSnapshot } from './sessionMachine.ts';
import { inputFrom } from './input.ts';
import { initialSnapshot, nextSnapshot } from './step.ts';

type CreatedData = Omit<EventOf<'conversation_created'>['data'], 'machine_version'>;
type CommandResult = Omit<EventOf<'command_output'>['data'], 'command'>;

/**
 * The stored event envelope's version (protocol/event.ts `EVENT_VERSION`), typed by
 * the protocol so that a new envelope version fails the type check here. A copy,
 * not an import: machines/ imports protocol types only, or its zod schemas would
 * follow into every browser bundle of the machines.
 */
const EVENT_VERSION: StoredEvent['v'] = 1;

/** What an agent step produced (the host rates a command's risk before it asks). */
export type AgentAnswer =
  | { type: 'message'; content: string; waitForResponse?: false }
  | { type: 'run'; command: string; risk: 'low' | 'high' }
  | { type: 'finish'; content: string };

/** One input to the decider: a user action, an effect's result, a deadline, or a lifecycle step of the host. */
export type DecisionInput =
  | { type: 'create'; conversationId: string; data: CreatedData }
  | { type: 'user_action'; action: UserAction }
  | { type: 'runtime_progress'; status: 'starting' | 'connecting' | 'setting_up' | 'connected' }
  | { type: 'runtime_lost'; message: string }
  | { type: 'agent_used'; usage: EventOf<'agent_usage'>['data'] }
  | { type: 'agent_answered'; cause: number; answer: AgentAnswer }
  | { type: 'agent_failed'; cause: number; code: string; message: string; retryAt?: string }
  | { type: 'command_finished'; cause: number; command: string; result: CommandResult }
  | { type: 'command_interrupted'; cause: number; command: string; why: string }
  | { type: 'command_unavailable'; cause: number; command: string; why: string }
  | { type: 'deadline'; name: Deadline['name'] }
  | { type: 'passivate'; reason: PassivationReason }
  | { type: 'rehydrate'; from: 'snapshot' | 'log'; folded: number; recordedState?: AgentState }
  /** A fork's first decision, on the parent's copied events: where it came from, then back as after a crash. */
  | { type: 'fork'; parent: string; seq: number; folded: number; recordedState?: AgentState }
  | { type: 'close'; reason: string };

export type RefusalCode = 'ILLEGAL_TRANSITION' | 'NOT_STARTED' | 'ENDED';

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

/** A proposal may read the state its earlier siblings led to (`session_passivated` names the state it leaves in). */
type Proposal = NewEvent | ((snapshot: SessionSnapshot) => NewEvent);

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
  const proposals = proposalsFor(snapshot, input);
  const events: StoredEvent[] = [];
  let current: SessionSnapshot = snapshot;
  let nextId = stamp.nextEventId;
  const at = stamp.now.toISOString();
  for (const proposal of proposals) {
    const event = stamped(typeof proposal === 'function' ? proposal(current) : proposal, nextId++, at, stamp);
    const machineEvent = toSessionEvent(event);
    if (machineEvent && !current.can(machineEvent)) {
      const state = agentStateOf(current);
      return refuse('ILLEGAL_TRANSITION', `cannot ${describe(machineEvent)} while the agent is ${state}`, state);
    }
    events.push(event);
    if (!machineEvent) continue;
    const next = nextSnapshot(current, machineEvent);
    const fact = stateFact(current, next);
    if (fact) events.push(stamped({ ...fact, cause: event.id }, nextId++, at, stamp));
    current = next;
  }
  return { ok: true, events, snapshot: current };
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
      return [userEvent(input.action)];
    case 'runtime_progress':
      return [{ source: env, type: 'runtime_status', data: { status: input.status } }];
    case 'runtime_lost':
      return [{ source: env, type: 'runtime_status', data: { status: 'disconnected', message: input.message } }];
    // What an LLM call used is stored apart, before its answer, so it counts even when the answer is stale.
    case 'agent_used':
      return [{ source: 'agent', type: 'agent_usage', data: input.usage }];
    case 'agent_answered':
      return [agentEvent(input.answer, input.cause)];
    case 'agent_failed': {
      const { code, message, retryAt, cause } = input;
      const data = retryAt === undefined ? { code, message } : { code, message, retry_at: retryAt };
      return [{ source: 'agent', type: 'agent_error', data, cause }];
    }
    case 'command_finished':
      return [commandOutput(input.cause, input.command, input.result)];
    case 'command_interrupted':
      return [interrupted(input.cause, input.command, input.why)];
    case 'command_unavailable':
      return [commandOutput(input.cause, input.command, unavailable(input.why))];
    case 'deadline':
      return [{ source: env, type: 'timeout', data: { deadline: input.name, message: DEADLINE_MESSAGES[input.name] } }];
    case 'passivate':
      return passivation(snapshot, input.reason);
    case 'rehydrate':
      return rehydration(snapshot, input);
    case 'fork':
      return [
        { source: 'environment', type: 'conversation_forked', data: { conversation_id: input.parent, seq: input.seq } },
        ...rehydration(snapshot, { from: 'log', folded: input.folded, recordedState: input.recordedState }),
      ];
    case 'close':
      return [{ source: env, type: 'session_closed', data: { reason: input.reason } }];
  }
}

/**
 * Leaving memory: a command still out is recorded as interrupted (one waiting
 * for confirmation never started: it stays pending), a runtime that was up is
 * recorded as stopped, then `session_passivated` with the state to come back in.
 */
function passivation(snapshot: SessionSnapshot, reason: PassivationReason): Proposal[] {
  const { pendingCommand, runtime } = snapshot.context;
  const out: Proposal[] = [];
  if (pendingCommand && !snapshot.matches({ active: 'awaiting_user_confirmation' })) {
    out.push(
      interrupted(
        pendingCommand.eventId,
        pendingCommand.command,
        'the session left memory before this command finished',
      ),
    );
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
  return out;
}

function userEvent(action: UserAction): NewEvent {
  switch (action.type) {
    case 'message':
      return { source: 'user', type: 'message', data: { content: action.content } };
    case 'run':
      return { source: 'user', type: 'command', data: { command: action.command } };
    case 'change_agent_state':
      return { source: 'user', type: 'change_agent_state', data: { state: action.state } };
    case 'reconnect_runtime':
      return { source: 'user', type: 'reconnect_runtime', data: {} };
  }
}

function agentEvent(answer: AgentAnswer, cause: number): NewEvent {
  switch (answer.type) {
    case 'message': {
      const { content, waitForResponse } = answer;
      const data = waitForResponse === false ? { content, wait_for_response: false as const } : { content };
      return { source: 'agent', type: 'message', data, cause };
    }
    case 'run':
      return { source: 'agent', type: 'command', data: { command: answer.command, risk: answer.risk }, cause };
    case 'finish':
      return { source: 'agent', type: 'finish', data: { content: answer.content }, cause };
  }
}

function commandOutput(cause: number, command: string, result: CommandResult): NewEvent {
  return { source: 'environment', type: 'command_output', data: { command, ...result }, cause };
}

/** The observation for a command that will never report: it is not run again. */
function interrupted(cause: number, command: string, why: string): NewEvent {
  const output = `interrupted: ${why}; it was not run again`;
  return commandOutput(cause, command, { exit_code: null, output, timed_out: false, truncated: false });
}

function unavailable(why: string): CommandResult {
  return {
    exit_code: null,
    output: `the runtime is not available (${why}); the command did not run to completion. Reconnect (refresh the page, or send reconnect_runtime) to start a new runtime in the same workspace.`,
    timed_out: false,
    truncated: false,
  };
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
