import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { KvCas } from '../../src/store/kvCas.ts';

const Set = z.object({ ids: z.array(z.string()) });
type IdSet = z.infer<typeof Set>;
const adding = (id: string) => (set: IdSet | undefined) =>
  set?.ids.includes(id) ? null : { ids: [...(set?.ids ?? []), id] };

/**
 * A bucket of one key whose first write is applied but never answered, as
 * when it reached a stream whose leader then moved; it counts the writes.
 */
function bucketLosingFirstAnswer() {
  let stored: { value: Uint8Array; revision: number } | null = {
    value: new TextEncoder().encode(JSON.stringify({ ids: ['a'] })),
    revision: 1,
  };
  const writes: number[] = [];
  const kv = {
    get: async () => (stored ? { ...stored, operation: 'PUT' } : null),
    update: (_key: string, json: string, revision: number) => {
      writes.push(performance.now());
      if (stored?.revision !== revision) {
        const conflict = {
          code: 400,
          err_code: JetStreamApiCodes.StreamWrongLastSequence,
          description: 'wrong last sequence',
        };
        return Promise.reject(new JetStreamApiError(conflict));
      }
      stored = { value: new TextEncoder().encode(json), revision: revision + 1 };
      return writes.length === 1 ? new Promise<never>(() => {}) : Promise.resolve(stored.revision);
    },
  };
  const ids = () => (JSON.parse(new TextDecoder().decode(stored!.value)) as IdSet).ids;
  return { cas: new KvCas(kv as unknown as KV), writes, ids };
}

describe('a compare-and-set whose write is answered by no one', () => {
  it('is written again after half a second when the change is idempotent, and applied once', async () => {
    const { cas, writes, ids } = bucketLosingFirstAnswer();
    const t0 = performance.now();
    // The second write meets the first, applied: a conflict; the next round finds nothing left to write.
    expect(await cas.change('k', Set, adding('b'), { idempotent: true })).toBeNull();
    expect(ids()).toEqual(['a', 'b']);
    expect(writes).toHaveLength(2);
    expect(writes[1]! - t0).toBeGreaterThanOrEqual(450);
    expect(performance.now() - t0).toBeLessThan(1_500);
  });

  it('is not written again otherwise: a change applied twice could count twice', async () => {
    const { cas, writes } = bucketLosingFirstAnswer();
    let settled = false;
    void cas.change('k', Set, adding('b')).finally(() => (settled = true));
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(settled).toBe(false);
    expect(writes).toHaveLength(1);
  });
});
