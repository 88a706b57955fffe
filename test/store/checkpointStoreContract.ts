// The one behaviour every CheckpointStore must have; each implementation's test file runs it.
import { describe, expect, test } from 'vitest';
import type { CheckpointStore } from '../../src/store/index.ts';
import { snapshotRecord } from './snapshotStoreContract.ts';

export function checkpointStoreContract(name: string, makeStore: () => Promise<CheckpointStore>): void {
  describe(`${name} honours the CheckpointStore contract`, () => {
    test('before(seq) is the checkpoint with the greatest seq below seq, whole; none below the first', async () => {
      const store = await makeStore();
      const first = snapshotRecord(10);
      const id = first.conversation_id;
      for (const seq of [30, 10, 20]) await store.put({ ...first, seq, next_event_id: seq });
      expect(await store.before(id, 10)).toBeUndefined();
      expect(await store.before(id, 11)).toEqual({ ...first, seq: 10, next_event_id: 10 });
      expect((await store.before(id, 30))?.seq).toBe(20);
      expect((await store.before(id, 31))?.seq).toBe(30);
      expect((await store.before(id, 1_000_000))?.seq).toBe(30);
    });

    test('conversations are apart, and a purge removes every checkpoint of one conversation only', async () => {
      const store = await makeStore();
      const a = snapshotRecord(5);
      const b = snapshotRecord(6);
      await store.put(a);
      await store.put({ ...a, seq: 8 });
      await store.put(b);
      expect(await store.before(a.conversation_id, 7)).toEqual(a);
      expect(await store.before(b.conversation_id, 6)).toBeUndefined();
      await store.purge(a.conversation_id);
      expect(await store.before(a.conversation_id, 100)).toBeUndefined();
      expect(await store.before(b.conversation_id, 100)).toEqual(b);
      await store.purge(a.conversation_id);
    });

    test('an id that is not a conversation id is refused', async () => {
      const store = await makeStore();
      await expect(store.before('a.b', 3)).rejects.toThrow();
      await expect(store.purge('*')).rejects.toThrow();
    });
  });
}
