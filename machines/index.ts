export {
  sessionMachine,
  agentStateOf,
  SESSION_MACHINE_VERSION,
  type SessionMachine,
  type SessionSnapshot,
  type SessionContext,
  type SessionInput,
  type PendingCommand,
  type Deadline,
} from './sessionMachine.ts';
export { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
export { foldEvents, inputFrom, type Fold, type FoldStep, type FoldOptions } from './fold.ts';
