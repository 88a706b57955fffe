import { z } from 'zod';
import { AgentState, PassivationReason, UserAction } from '../../protocol/index.ts';
import { NodeUnreachableError } from '../store/index.ts';
import { ConversationNotFoundError, IllegalTransitionError, SessionUnavailableError, TetherError } from '../errors.ts';
import { LeaseLapsedError } from './ownership.ts';

/** Another node owns the conversation (`node`, when known): the request goes there, or is asked again. */
export class NotOwnerError extends TetherError {
  readonly node: string | null;
  constructor(conversationId: string, node: string | null) {
    super('NOT_OWNER', `conversation ${conversationId} is owned by ${node === null ? 'another node' : `node ${node}`}`);
    this.node = node;
  }
}

/** What one node asks the owner of a conversation to do. */
export const ForwardRequest = z.discriminatedUnion('op', [
  z.object({
    op: z.literal('act'),
    conversation_id: z.string(),
    user: z.string(),
    action: UserAction,
    client_id: z.string(),
  }),
  z.object({
    op: z.literal('delete'),
    conversation_id: z.string(),
    user: z.string(),
    keep_workspace: z.boolean().default(false),
  }),
  z.object({ op: z.literal('passivate'), conversation_id: z.string(), reason: PassivationReason }),
  /** The deltas of the agent step attempt under way, for a node whose clients joined late or missed some. */
  z.object({ op: z.literal('deltas'), conversation_id: z.string() }),
]);
export type ForwardRequest = z.infer<typeof ForwardRequest>;

const ForwardAnswer = z.union([
  z.object({ ok: z.literal(true), seq: z.number().optional(), duplicate: z.boolean().optional() }),
  z.object({ error: z.object({ code: z.string(), message: z.string(), state: AgentState.optional() }) }),
]);
type ForwardAnswer = z.infer<typeof ForwardAnswer>;

/** The answer for an error the owner met, kept to what the requester needs to rebuild it. */
export function errorAnswer(err: unknown): ForwardAnswer {
  if (err instanceof IllegalTransitionError)
    return { error: { code: err.code, message: err.message, state: err.state } };
  if (err instanceof TetherError) return { error: { code: err.code, message: err.message } };
  return { error: { code: 'INTERNAL', message: 'internal error' } };
}

/** The owner's answer as a result, or the error it reported, rebuilt as the same kind of error. */
export function resultOf(conversationId: string, answer: unknown): { seq: number; duplicate: boolean } {
  const parsed = ForwardAnswer.safeParse(answer);
  if (!parsed.success) throw new Error(`a node answered a forwarded request with ${JSON.stringify(answer)}`);
  const value = parsed.data;
  if ('ok' in value) return { seq: value.seq ?? 0, duplicate: value.duplicate ?? false };
  const { code, message, state } = value.error;
  switch (code) {
    case 'CONVERSATION_NOT_FOUND':
      throw new ConversationNotFoundError(conversationId);
    case 'ILLEGAL_TRANSITION':
      throw new IllegalTransitionError(message, state ?? 'error');
    case 'SESSION_UNAVAILABLE':
    case 'SESSION_CLOSED': // its name on nodes of an earlier version, during a rolling upgrade
      throw new SessionUnavailableError(conversationId, message);
    case 'NOT_OWNER':
    case 'NODE_LEASE_LAPSED':
    case 'NODE_DRAINING':
      // Both mean: ask again, the owner may have changed.
      throw new NotOwnerError(conversationId, null);
    case 'NODE_UNREACHABLE':
      throw new NodeUnreachableError(conversationId, message);
    case 'INTERNAL':
      throw new Error(`the owner of ${conversationId} failed: ${message}`);
    default:
      throw new TetherError(code, message);
  }
}

/** Errors after which a forwarded request is worth sending again, to whoever owns the conversation then. */
export function isRetryable(err: unknown): boolean {
  return err instanceof NotOwnerError || err instanceof NodeUnreachableError || err instanceof LeaseLapsedError;
}
