import { z } from 'zod';
import { ConversationId } from '../../protocol/index.ts';
import type { ConversationEntry, WorkMarker } from './conversationStore.ts';

/** A conversation record of the layout before the per-user index: key = conversation id. */
export const LegacyRecord = z.object({
  conversation_id: ConversationId,
  user: z.string().min(1),
  created_at: z.iso.datetime(),
});
export type LegacyRecord = z.infer<typeof LegacyRecord>;

/**
 * What an old record becomes: an entry whose state is not known until its
 * log is read (`loading`, out of memory), and an unsettled work marker so
 * that recovery reads that log once and rewrites the entry.
 */
export function migrateLegacyRecord(record: LegacyRecord): { entry: ConversationEntry; marker: WorkMarker } {
  return {
    entry: { ...record, state: 'loading', in_memory: false },
    marker: { conversation_id: record.conversation_id, user: record.user, unsettled: true },
  };
}
