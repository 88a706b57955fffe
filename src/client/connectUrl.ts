/**
 * The address of one connection: the server's `/ws` address with the
 * caller's own query kept, and `conversation_id`, `token` and the cursor as
 * `after_seq` set.
 */
export function connectUrl(options: { url: string; conversationId?: string; token?: string }, cursor: number): string {
  const address = new URL(options.url);
  if (options.conversationId !== undefined) address.searchParams.set('conversation_id', options.conversationId);
  if (options.token !== undefined) address.searchParams.set('token', options.token);
  address.searchParams.set('after_seq', String(cursor));
  return address.toString();
}

/** The url's `after_seq` when it is a cursor (a non-negative integer), else undefined. */
export function afterSeqOf(url: string): number | undefined {
  const text = new URL(url).searchParams.get('after_seq');
  if (text === null || !/^\d+$/.test(text)) return undefined;
  const seq = Number(text);
  return Number.isSafeInteger(seq) ? seq : undefined;
}
