export { agentStateOf, isBusy, BUSY_AGENT_STATES } from './agentState.ts';
export {
  sessionMachine,
  SESSION_MACHINE_VERSION,
  UNRECORDED_MACHINE_VERSION,
  DEFAULT_RATE_LIMIT_RETRIES,
  LEGACY_MAX_ATTEMPTS,
  type SessionMachine,
  type SessionSnapshot,
  type SessionContext,
  type SessionInput,
  type PendingCommand,
  type Deadline,
  type RepositoryProgress,
} from './sessionMachine.ts';
export type { SessionTag } from './sessionSetup.ts';
export { toSessionEvent, type SessionEvent } from './sessionEvents.ts';
export { foldEvents, type Fold, type FoldStep, type FoldOptions } from './fold.ts';
export { initialSnapshot, nextSnapshot } from './step.ts';
export {
  stateAt,
  statePaths,
  traceLog,
  type FoldStart,
  type StateAt,
  type TraceStep,
  type Transition,
} from './inspect.ts';
export { inputFrom } from './input.ts';
export {
  decide,
  type AgentAnswer,
  type AnswerCall,
  type Decision,
  type DecisionInput,
  type DecisionStamp,
  type Streamed,
  type RefusalCode,
} from './decide.ts';
export { effectsOf, effectKey, type Effect } from './effects.ts';
export { needsConfirmation } from './calls.ts';
export { UPCASTERS, upcasterFor, type Upcaster } from './upcasters.ts';
