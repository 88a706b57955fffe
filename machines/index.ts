export {
  sessionMachine,
  agentStateOf,
  SESSION_MACHINE_VERSION,
  type SessionMachine,
  type SessionSnapshot,
  type SessionContext,
  type SessionInput,
  type PendingCommand,
} from './sessionMachine.ts';
export { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
export { foldEvents, type Fold } from './fold.ts';
