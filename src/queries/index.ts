export { HostQueries, type ConversationQueries } from './conversationQueries.ts';
export { ConversationReads, type ConnectPoint, type ConversationPage } from './conversationReads.ts';
export { ConversationFeed, type FeedListener, type FeedMember } from './conversationFeed.ts';
export type { HeldAttempt } from './deltaRoom.ts';
