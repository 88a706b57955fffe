import { z } from 'zod';
import { ConversationId } from '../protocol/index.ts';

export const ConversationRecord = z.object({
  conversation_id: ConversationId,
  user: z.string(),
  created_at: z.iso.datetime(),
});
export type ConversationRecord = z.infer<typeof ConversationRecord>;

/**
 * Conversation metadata (who owns it, when it was made), kept apart from the
 * log so listing never reads events. Implementations: `kvConversationStore`
 * (JetStream KV) and `memoryConversationStore`.
 */
export interface ConversationStore {
  put(record: ConversationRecord): Promise<void>;
  get(conversationId: string): Promise<ConversationRecord | undefined>;
  list(): Promise<ConversationRecord[]>;
  delete(conversationId: string): Promise<void>;
}
