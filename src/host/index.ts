export { NodeHost } from './nodeHost.ts';
export { HostCommands, type ConversationCommands } from './conversationCommands.ts';
export { DEFAULT_LIMITS, DEFAULT_MAX_ATTEMPTS, type HostDeps, type SessionLimits } from './hostDeps.ts';
export { TOO_MANY_CONVERSATIONS } from './passivationPolicy.ts';
export { SecretsNeedKeyError } from './secretKeeper.ts';
