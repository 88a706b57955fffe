import type { KV } from '@nats-io/kv';
import type { ConversationEntry } from './conversationStore.ts';
import { ORDER_DONE_KEY } from './conversationKeys.ts';
import { removeKey } from './kvRemove.ts';
import { scanKvWithDeletes, type KvScanDeps } from './kvScan.ts';
import { parseOrNull } from './kvValues.ts';
import { toStoreError } from './natsErrors.ts';

/**
 * Once per conversation bucket: gives every entry written before the creation
 * order (no `ordinal`) its place, oldest first, and its running set (`put`),
 * and removes the delete markers earlier versions left (every listing read
 * them). The one read of the whole bucket, at the first start of this
 * version; `x.order` says it is done. How many entries it ordered.
 */
export async function enterOrder(
  kv: KV,
  scan: KvScanDeps,
  put: (entry: ConversationEntry) => Promise<unknown>,
): Promise<number> {
  try {
    const done = await kv.get(ORDER_DONE_KEY);
    if (done?.operation === 'PUT') return 0;
  } catch (err) {
    throw toStoreError(err, 'reading the order migration');
  }
  let all;
  try {
    all = await scanKvWithDeletes(scan, '');
  } catch (err) {
    throw toStoreError(err, 'reading the bucket to order it');
  }
  const unordered = all
    // An entry that does not parse is left as it is (a read of it fails, as before).
    .flatMap(({ key, value }) => (value !== null && key.startsWith('u.') ? [parseOrNull(key, value)] : []))
    .filter((entry) => entry !== null)
    .filter((entry) => entry.ordinal === undefined)
    .sort(
      (a, b) => Date.parse(a.created_at) - Date.parse(b.created_at) || (a.conversation_id < b.conversation_id ? -1 : 1),
    );
  for (const entry of unordered) await put(entry);
  try {
    // Bounded by the marker's revision: a key written again since keeps its value.
    for (const { key, value, revision } of all) if (value === null && revision > 0) await removeKey(kv, key, revision);
    await kv.put(ORDER_DONE_KEY, JSON.stringify({ at: new Date().toISOString() }));
  } catch (err) {
    throw toStoreError(err, 'finishing the order migration');
  }
  return unordered.length;
}
