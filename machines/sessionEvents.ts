import type { AgentState, AttemptReason, PassivationReason, StoredEvent } from '../protocol/index.ts';

type RuntimeStep = 'starting' | 'connecting' | 'setting_up' | 'connected' | 'stopped';

/**
 * What every machine event carries: the stored event's id and its time (`ts`,
 * epoch ms; always there on events from `toSessionEvent`, optional for hand-made ones).
 */
interface Stamp {
  eventId: number;
  at?: number;
}

/**
 * Events the session machine takes. Each one comes from exactly one stored
 * event (see `toSessionEvent`), so folding the log replays the machine.
 * `cause` ties an effect's result to the request that asked for it, so a late
 * result of an abandoned request is refused. Times (`at`, `retryAt`) are epoch
 * milliseconds taken from stored data.
 */
export type SessionEvent = Stamp &
  (
    | { type: `runtime.${RuntimeStep}` }
    | { type: 'runtime.disconnected'; reason: string }
    | { type: 'repository.cloned' }
    | { type: 'repository.clone_failed'; reason: string }
    | { type: 'repository.instructions_loaded' }
    | { type: 'user.message' }
    | { type: 'user.run'; command: string }
    | { type: 'user.change_state'; state: AgentState }
    | { type: 'user.reconnect_runtime' }
    | { type: 'user.interrupt' }
    | { type: 'agent.message'; cause: number | undefined; attempt?: number; goesOn?: boolean; interrupted?: boolean }
    | {
        type: 'agent.run';
        cause: number | undefined;
        attempt?: number;
        /** The shell command, or the tool's name for a `tool_call`. */
        command: string;
        tool?: { name: string; arguments: Record<string, unknown> };
        callId?: string;
        needsConfirmation: boolean;
      }
    | { type: 'agent.finish'; cause: number | undefined; attempt?: number }
    | { type: 'agent.attempt'; item: string; attempt: number; counted: boolean }
    | { type: 'agent.usage'; cost: number }
    | { type: 'agent.failed'; cause: number | undefined; reason: string }
    | { type: 'agent.rate_limited'; cause: number | undefined; reason: string; retryAt: number }
    | { type: 'command.finished'; cause: number | undefined }
    | { type: 'deadline.passed'; at: number; name: 'start' | 'retry'; reason: string }
    | { type: 'session.passivate'; reason: PassivationReason }
    | { type: 'session.rehydrate' }
    | { type: 'session.upgrade'; to: number }
    | { type: 'session.fork'; parent: string; seq: number }
    | { type: 'session.close'; reason: string }
  );

/**
 * Attempts that do not count against the bound: the step was cut by how the
 * session is hosted (a passivation, its node stopping) or is asked again in a
 * fork. The bound is for the LLM's failures.
 */
const UNCOUNTED: ReadonlySet<AttemptReason> = new Set(['resumed', 'owner_lost', 'forked']);

/** Whether an attempt for `reason` counts against `max_attempts`. */
export function countsAgainstBound(reason: AttemptReason): boolean {
  return !UNCOUNTED.has(reason);
}

const RUNTIME_STEPS: Record<string, `runtime.${RuntimeStep}`> = {
  starting: 'runtime.starting',
  // Only logs of machine version 3 hold it: their host stored it when a reconnect began.
  reconnecting: 'runtime.starting',
  connecting: 'runtime.connecting',
  setting_up: 'runtime.setting_up',
  connected: 'runtime.connected',
  stopped: 'runtime.stopped',
};

/**
 * The machine event a stored event stands for, or null for facts the machine
 * itself produced (`agent_state_changed`), the creation record (the
 * machine's input) and facts for the agent alone (`tools_listed`).
 */
export function toSessionEvent(event: StoredEvent): SessionEvent | null {
  const { id: eventId, cause } = event;
  // Built in one literal each: folds make one per stored event.
  const at = Date.parse(event.ts);
  switch (event.type) {
    case 'conversation_created':
    case 'agent_state_changed':
      return null;
    case 'runtime_status': {
      const step = RUNTIME_STEPS[event.data.status];
      if (step) return { type: step, eventId, at };
      const reason = event.data.message ?? `runtime ${event.data.status}`;
      return { type: 'runtime.disconnected', eventId, at, reason };
    }
    case 'message':
      return event.source === 'user'
        ? { type: 'user.message', eventId, at }
        : {
            type: 'agent.message',
            eventId,
            at,
            cause,
            attempt: event.data.attempt,
            goesOn: event.data.wait_for_response === false,
            interrupted: event.data.interrupted === true,
          };
    case 'command':
      return event.source === 'user'
        ? { type: 'user.run', eventId, at, command: event.data.command }
        : {
            type: 'agent.run',
            eventId,
            at,
            cause,
            attempt: event.data.attempt,
            command: event.data.command,
            ...(event.data.call_id !== undefined && { callId: event.data.call_id }),
            needsConfirmation: event.data.needs_confirmation === true,
          };
    case 'tool_call':
      return {
        type: 'agent.run',
        eventId,
        at,
        cause,
        attempt: event.data.attempt,
        command: event.data.tool,
        tool: { name: event.data.tool, arguments: event.data.arguments },
        callId: event.data.call_id,
        needsConfirmation: event.data.needs_confirmation === true,
      };
    case 'tool_result':
      return { type: 'command.finished', eventId, at, cause };
    case 'change_agent_state':
      return { type: 'user.change_state', eventId, at, state: event.data.state };
    case 'reconnect_runtime':
      return { type: 'user.reconnect_runtime', eventId, at };
    case 'interrupt':
      return { type: 'user.interrupt', eventId, at };
    case 'finish':
      return { type: 'agent.finish', eventId, at, cause, attempt: event.data.attempt };
    case 'agent_attempt': {
      const { item_id: item, attempt, reason } = event.data;
      return { type: 'agent.attempt', eventId, at, item, attempt, counted: countsAgainstBound(reason) };
    }
    case 'agent_usage':
      return { type: 'agent.usage', eventId, at, cost: event.data.cost };
    case 'agent_error':
      if (event.data.retry_at !== undefined) {
        const retryAt = Date.parse(event.data.retry_at);
        return { type: 'agent.rate_limited', eventId, at, cause, reason: event.data.message, retryAt };
      }
      return { type: 'agent.failed', eventId, at, cause, reason: event.data.message };
    case 'command_output':
      return { type: 'command.finished', eventId, at, cause };
    case 'tools_listed':
      return null;
    case 'timeout':
      return { type: 'deadline.passed', eventId, at, name: event.data.deadline, reason: event.data.message };
    case 'session_passivated':
      return { type: 'session.passivate', eventId, at, reason: event.data.reason };
    case 'session_rehydrated':
      return { type: 'session.rehydrate', eventId, at };
    case 'machine_upgraded':
      return { type: 'session.upgrade', eventId, at, to: event.data.to };
    case 'conversation_forked':
      return { type: 'session.fork', eventId, at, parent: event.data.conversation_id, seq: event.data.seq };
    case 'session_closed':
      return { type: 'session.close', eventId, at, reason: event.data.reason };
    case 'repository_cloned':
      return { type: 'repository.cloned', eventId, at };
    case 'repository_clone_failed':
      return {
        type: 'repository.clone_failed',
        eventId,
        at,
        reason: `the repository ${event.data.url} could not be cloned: ${event.data.message}`,
      };
    case 'instructions_loaded':
      return { type: 'repository.instructions_loaded', eventId, at };
  }
}
