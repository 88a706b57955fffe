export { AgentState, RuntimeStatus } from './agentState.ts';
export { ConversationId, ClientId, Seq } from './ids.ts';
export {
  EVENT_VERSION,
  EventSource,
  StoredEvent,
  LoggedEvent,
  ConversationCreatedData,
  PassivationReason,
  AttemptReason,
  DoubleTexting,
  type StoredEventType,
  type EventOf,
  type NewEvent,
} from './event.ts';
export { CommandOutputData, SecurityRisk, ToolInfo, ToolResultData } from './calls.ts';
export {
  UserAction,
  ClientFrame,
  ServerFrame,
  StatusLevel,
  MAX_MESSAGE_CHARS,
  MAX_COMMAND_CHARS,
  type StatusFrame,
  type DeltaFrame,
} from './frames.ts';
export {
  CreateConversationBody,
  ActionBody,
  EventsQuery,
  ConversationInfo,
  ClusterNode,
  ClusterQuery,
  ClusterView,
  ConversationOwner,
  ConversationsQuery,
  ConversationSummary,
  ConversationPage,
  ConversationState,
  ForkBody,
  StateQuery,
  DeleteQuery,
  encodeListCursor,
  DEFAULT_MAX_ITERATIONS,
  DEFAULT_LIST_LIMIT,
  MAX_LIST_LIMIT,
  type ListPosition,
} from './rest.ts';
export { eventBytes, parseStoredEvent } from './eventJson.ts';
