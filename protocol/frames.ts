import { z } from 'zod';
import { AgentState } from './agentState.ts';
import { StoredEvent } from './event.ts';
import { ClientId, ConversationId, Seq } from './ids.ts';

export const MAX_MESSAGE_CHARS = 100_000;
export const MAX_COMMAND_CHARS = 10_000;

export const UserAction = z.discriminatedUnion('type', [
  z.object({ type: z.literal('message'), content: z.string().min(1).max(MAX_MESSAGE_CHARS) }),
  z.object({ type: z.literal('change_agent_state'), state: AgentState }),
  z.object({ type: z.literal('run'), command: z.string().min(1).max(MAX_COMMAND_CHARS) }),
  z.object({ type: z.literal('reconnect_runtime') }),
  z.object({ type: z.literal('interrupt') }),
]);
export type UserAction = z.infer<typeof UserAction>;

export const ClientFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('user_action'), action: UserAction, client_id: ClientId.optional() }),
  z.object({ type: z.literal('ping') }),
]);
export type ClientFrame = z.infer<typeof ClientFrame>;

export const StatusLevel = z.enum(['info', 'warning', 'error']);

export const ServerFrame = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('sync'),
    conversation_id: ConversationId,
    through_seq: Seq,
    state: AgentState,
  }),
  z.object({ type: z.literal('event'), seq: Seq, event: StoredEvent }),
  z.object({
    type: z.literal('delta'),
    item_id: z.string(),
    attempt: z.number().int().min(1),
    index: z.number().int().min(0),
    text: z.string(),
  }),
  z.object({ type: z.literal('status'), level: StatusLevel, id: z.string(), message: z.string() }),
  z.object({
    type: z.literal('error'),
    code: z.string(),
    message: z.string(),
    client_id: ClientId.optional().describe('The `client_id` of the refused action, when it carried one.'),
  }),
  z.object({ type: z.literal('pong') }),
]);
export type ServerFrame = z.infer<typeof ServerFrame>;
export type StatusFrame = Extract<ServerFrame, { type: 'status' }>;
/** A piece of an agent reply as it is generated (transient, never stored). */
export type DeltaFrame = Extract<ServerFrame, { type: 'delta' }>;
