import { assertConversationId } from './assertConversationId.ts';

/**
 * The conversation bucket's key layout:
 * - `u.<user>.<conversation_id>`: the user's index entry (`<user>` is the
 *   user name in base64url, so any name is a key token and no user's prefix
 *   is another's);
 * - `w.<conversation_id>`: the conversation's work marker;
 * - `c.<user>`: the user's creation counter, `p.<user>.<n>`: page `n` of the
 *   user's creation order (`kvConversationOrder.ts`);
 * - `r.<user>`: the user's conversations whose entry says running in memory,
 *   with since when (what the per-user running cap reads);
 * - `d.<conversation_id>`: a delete under way (recovery finishes it);
 * - `x.order`: written once every entry of the layout before the creation order has one;
 * - a bare `<conversation_id>`: a record of the layout before these (migrated when the store opens).
 */
export function userToken(user: string): string {
  if (user === '') throw new TypeError('a user name is not empty');
  return Buffer.from(user, 'utf8').toString('base64url');
}

export function userPrefix(user: string): string {
  return `u.${userToken(user)}.`;
}

export function entryKey(user: string, conversationId: string): string {
  assertConversationId(conversationId);
  return `${userPrefix(user)}${conversationId}`;
}

export const MARKER_PREFIX = 'w.';
export const DELETING_PREFIX = 'd.';
export const ORDER_DONE_KEY = 'x.order';

export function counterKey(user: string): string {
  return `c.${userToken(user)}`;
}

export function orderPagePrefix(user: string): string {
  return `p.${userToken(user)}.`;
}

export function runningKey(user: string): string {
  return `r.${userToken(user)}`;
}

export function deletingKey(conversationId: string): string {
  assertConversationId(conversationId);
  return `${DELETING_PREFIX}${conversationId}`;
}

export function markerKey(conversationId: string): string {
  assertConversationId(conversationId);
  return `${MARKER_PREFIX}${conversationId}`;
}

/** A key of the layout before the per-user index: the conversation id alone. */
export function isLegacyKey(key: string): boolean {
  return !key.includes('.');
}
