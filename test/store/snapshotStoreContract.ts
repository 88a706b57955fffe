// The one behaviour every SnapshotStore must have; each implementation's test file runs it.
import { describe, expect, test } from 'vitest';
import type { SnapshotRecord, SnapshotStore } from '../../src/store/index.ts';
import { newConversationId } from './eventLogContract.ts';

export function snapshotRecord(seq = 7): SnapshotRecord {
  return {
    conversation_id: newConversationId(),
    machine_version: 2,
    seq,
    next_event_id: 5,
    snapshot: { value: { active: 'awaiting_user_input' }, context: { iterations: 1 } },
  };
}

export function snapshotStoreContract(name: string, makeStore: () => Promise<SnapshotStore>): void {
  describe(`${name} honours the SnapshotStore contract`, () => {
    test('a snapshot put can be got back whole', async () => {
      const store = await makeStore();
      const r = snapshotRecord();
      await store.put(r);
      expect(await store.get(r.conversation_id)).toEqual(r);
    });

    test('a later put replaces the earlier snapshot of the same conversation', async () => {
      const store = await makeStore();
      const r = snapshotRecord(3);
      await store.put(r);
      await store.put({ ...r, seq: 9 });
      expect((await store.get(r.conversation_id))?.seq).toBe(9);
    });

    test('an unknown or deleted conversation has no snapshot', async () => {
      const store = await makeStore();
      const r = snapshotRecord();
      expect(await store.get(r.conversation_id)).toBeUndefined();
      await store.put(r);
      await store.delete(r.conversation_id);
      expect(await store.get(r.conversation_id)).toBeUndefined();
    });
  });
}
