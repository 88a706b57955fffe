export { SessionManager } from './sessionManager.ts';
export { DEFAULT_LIMITS, type SessionManagerDeps, type SessionLimits } from './sessionManagerDeps.ts';
export { ClusterOwnership, LeaseLapsedError, soloOwnership, type Ownership, type Route } from './ownership.ts';
export { NotOwnerError } from './forwarding.ts';
export type { ConnectPoint, ConversationPage } from './conversationReads.ts';
export { loadSessionState, wasMidTask, type LoadedState } from './loadSession.ts';
export { TOO_MANY_CONVERSATIONS } from './passivationPolicy.ts';
export { Session, type SubmitResult, type RestoredState } from './session.ts';
export { ConversationFeed, type FeedListener } from './conversationFeed.ts';
export {
  BadSeqError,
  ConversationNotFoundError,
  IllegalTransitionError,
  NodeDrainingError,
  SessionClosedError,
} from './errors.ts';
export { SecretsNeedKeyError } from './secretKeeper.ts';
