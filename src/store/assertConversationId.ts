import { ConversationId } from '../../protocol/index.ts';

/**
 * Throws a TypeError unless `id` is a valid conversation id. Ids become NATS
 * subject tokens and KV keys, where a dot or a wildcard would address other
 * conversations, so the store checks them even though the edge already did.
 */
export function assertConversationId(id: string): void {
  if (!ConversationId.safeParse(id).success) {
    throw new TypeError(`invalid conversation id ${JSON.stringify(id)}`);
  }
}
