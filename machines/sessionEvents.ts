import type { AgentState, PassivationReason, StoredEvent } from '../src/protocol/index.ts';

type RuntimeStep = 'starting' | 'connecting' | 'setting_up' | 'connected' | 'stopped';

/**
 * Events the session machine takes. Each one comes from exactly one stored
 * event (see `toSessionEvent`), so folding the log replays the machine.
 * `eventId` is the stored event's id; `cause` ties an effect's result to the
 * request that asked for it, so a late result of an abandoned request is refused.
 * Times (`at`, `retryAt`) are epoch milliseconds taken from stored data.
 */
export type SessionEvent =
  | { type: `runtime.${RuntimeStep}`; eventId: number }
  | { type: 'runtime.disconnected'; eventId: number; reason: string }
  | { type: 'user.message'; eventId: number }
  | { type: 'user.run'; eventId: number; command: string }
  | { type: 'user.change_state'; eventId: number; state: AgentState }
  | { type: 'agent.message'; eventId: number; cause: number | undefined; goesOn?: boolean }
  | { type: 'agent.run'; eventId: number; cause: number | undefined; command: string; risky: boolean }
  | { type: 'agent.finish'; eventId: number; cause: number | undefined }
  | { type: 'agent.usage'; eventId: number; cost: number }
  | { type: 'agent.failed'; eventId: number; cause: number | undefined; reason: string }
  | { type: 'agent.rate_limited'; eventId: number; cause: number | undefined; reason: string; retryAt: number }
  | { type: 'command.finished'; eventId: number; cause: number | undefined }
  | { type: 'deadline.passed'; eventId: number; name: 'start' | 'retry'; at: number; reason: string }
  | { type: 'session.passivate'; eventId: number; reason: PassivationReason }
  | { type: 'session.rehydrate'; eventId: number }
  | { type: 'session.close'; eventId: number; reason: string };

const RUNTIME_STEPS: Record<string, `runtime.${RuntimeStep}`> = {
  starting: 'runtime.starting',
  reconnecting: 'runtime.starting',
  connecting: 'runtime.connecting',
  setting_up: 'runtime.setting_up',
  connected: 'runtime.connected',
  stopped: 'runtime.stopped',
};

/**
 * The machine event a stored event stands for, or null for facts the machine
 * itself produced (`agent_state_changed`) and the creation record (the
 * machine's input).
 */
export function toSessionEvent(event: StoredEvent): SessionEvent | null {
  const { id: eventId, cause } = event;
  switch (event.type) {
    case 'conversation_created':
    case 'agent_state_changed':
      return null;
    case 'runtime_status': {
      const step = RUNTIME_STEPS[event.data.status];
      if (step) return { type: step, eventId };
      return { type: 'runtime.disconnected', eventId, reason: event.data.message ?? `runtime ${event.data.status}` };
    }
    case 'message':
      return event.source === 'user'
        ? { type: 'user.message', eventId }
        : { type: 'agent.message', eventId, cause, goesOn: event.data.wait_for_response === false };
    case 'command':
      return event.source === 'user'
        ? { type: 'user.run', eventId, command: event.data.command }
        : { type: 'agent.run', eventId, cause, command: event.data.command, risky: event.data.risk === 'high' };
    case 'change_agent_state':
      return { type: 'user.change_state', eventId, state: event.data.state };
    case 'finish':
      return { type: 'agent.finish', eventId, cause };
    case 'agent_usage':
      return { type: 'agent.usage', eventId, cost: event.data.cost };
    case 'agent_error':
      if (event.data.retry_at !== undefined) {
        const retryAt = Date.parse(event.data.retry_at);
        return { type: 'agent.rate_limited', eventId, cause, reason: event.data.message, retryAt };
      }
      return { type: 'agent.failed', eventId, cause, reason: event.data.message };
    case 'command_output':
      return { type: 'command.finished', eventId, cause };
    case 'timeout':
      return {
        type: 'deadline.passed',
        eventId,
        name: event.data.deadline,
        at: Date.parse(event.ts),
        reason: event.data.message,
      };
    case 'session_passivated':
      return { type: 'session.passivate', eventId, reason: event.data.reason };
    case 'session_rehydrated':
      return { type: 'session.rehydrate', eventId };
    case 'session_closed':
      return { type: 'session.close', eventId, reason: event.data.reason };
  }
}
