import type { AgentState, StoredEvent } from '../src/protocol/index.ts';

/**
 * Events the session machine takes. Each one comes from exactly one stored
 * event (see `toSessionEvent`), so folding the log replays the machine.
 * `eventId` is the stored event's id; `cause` ties an effect's result to the
 * request that asked for it, so a late result of an abandoned request is refused.
 */
export type SessionEvent =
  | { type: 'runtime.starting'; eventId: number }
  | { type: 'runtime.connected'; eventId: number }
  | { type: 'runtime.disconnected'; eventId: number; reason: string }
  | { type: 'user.message'; eventId: number }
  | { type: 'user.run'; eventId: number; command: string }
  | { type: 'user.change_state'; eventId: number; state: AgentState }
  | { type: 'agent.message'; eventId: number; cause: number | undefined }
  | { type: 'agent.run'; eventId: number; cause: number | undefined; command: string }
  | { type: 'agent.finish'; eventId: number; cause: number | undefined }
  | { type: 'agent.failed'; eventId: number; cause: number | undefined; reason: string }
  | { type: 'command.finished'; eventId: number; cause: number | undefined };

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
    case 'runtime_status':
      if (event.data.status === 'connected') return { type: 'runtime.connected', eventId };
      if (event.data.status === 'starting' || event.data.status === 'reconnecting') {
        return { type: 'runtime.starting', eventId };
      }
      return { type: 'runtime.disconnected', eventId, reason: event.data.message ?? `runtime ${event.data.status}` };
    case 'message':
      return event.source === 'user' ? { type: 'user.message', eventId } : { type: 'agent.message', eventId, cause };
    case 'command':
      return event.source === 'user'
        ? { type: 'user.run', eventId, command: event.data.command }
        : { type: 'agent.run', eventId, cause, command: event.data.command };
    case 'change_agent_state':
      return { type: 'user.change_state', eventId, state: event.data.state };
    case 'finish':
      return { type: 'agent.finish', eventId, cause };
    case 'agent_error':
      return { type: 'agent.failed', eventId, cause, reason: event.data.message };
    case 'command_output':
      return { type: 'command.finished', eventId, cause };
  }
}
