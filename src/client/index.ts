// The one protocol client (browser and Node): the page, the tests and the bench use it.
export { ProtocolClient, protocolClient, FINAL_CLOSE_CODES, type ProtocolClientOptions } from './protocolClient.ts';
export type {
  ClientState,
  CloseInfo,
  InvalidFrame,
  ProtocolHandlers,
  SyncFrame,
  EventFrame,
  StatusFrame,
  DeltaFrame,
  ErrorFrame,
  PongFrame,
} from './clientHandlers.ts';
export { lightFrameCheck, type FrameCheck, type FrameCheckResult } from './frameCheck.ts';
export { backoffDelay, type Backoff } from './backoff.ts';
export { ProtocolClientError, ConnectionClosedError } from './errors.ts';
export type { WebSocketLike, WebSocketConstructor } from './webSocketLike.ts';
