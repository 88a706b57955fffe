export { SessionManager, type SessionManagerDeps, type ConversationSummary } from './sessionManager.ts';
export { Session, type SubmitResult, type RestoredState } from './session.ts';
export { ConversationFeed, type FeedListener } from './conversationFeed.ts';
export { ConversationNotFoundError, IllegalTransitionError, SessionClosedError } from './errors.ts';
