export { SessionManager } from './sessionManager.ts';
export { DEFAULT_LIMITS, type SessionManagerDeps, type SessionLimits } from './sessionManagerDeps.ts';
export { ClusterOwnership, LeaseLapsedError, soloOwnership, type Ownership, type Route } from '../cluster/ownership.ts';
export { NotOwnerError } from '../cluster/forwarding.ts';
export type { ConnectPoint, ConversationPage } from '../queries/conversationReads.ts';
export { loadSessionState, wasMidTask, type LoadedState } from '../conversation/loadSession.ts';
export { TOO_MANY_CONVERSATIONS } from './passivationPolicy.ts';
export { Session, type SubmitResult, type RestoredState } from '../conversation/session.ts';
export { ConversationFeed, type FeedListener } from '../queries/conversationFeed.ts';
export {
  BadSeqError,
  ConversationNotFoundError,
  IllegalTransitionError,
  NodeDrainingError,
  SessionClosedError,
} from '../errors.ts';
export { SecretsNeedKeyError } from './secretKeeper.ts';
