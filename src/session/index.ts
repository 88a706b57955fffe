export {
  SessionManager,
  DEFAULT_LIMITS,
  NodeDrainingError,
  SecretsNeedKeyError,
  type SessionManagerDeps,
  type SessionLimits,
} from './sessionManager.ts';
export { ClusterOwnership, LeaseLapsedError, soloOwnership, type Ownership, type Route } from './ownership.ts';
export { NotOwnerError } from './forwarding.ts';
export type { ConnectPoint, ConversationPage } from './conversationReads.ts';
export { loadSessionState, wasMidTask, type LoadedState } from './loadSession.ts';
export { TOO_MANY_CONVERSATIONS } from './passivationPolicy.ts';
export { Session, type SubmitResult, type RestoredState } from './session.ts';
export { ConversationFeed, type FeedListener } from './conversationFeed.ts';
export { ConversationNotFoundError, IllegalTransitionError, SessionClosedError } from './errors.ts';
