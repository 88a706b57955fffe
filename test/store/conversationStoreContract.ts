// The one behaviour every ConversationStore must have; each implementation's test file runs it.
import { describe, expect, test } from 'vitest';
import type { ConversationRecord, ConversationStore } from '../../src/store/conversationStore.ts';
import { newConversationId } from './eventLogContract.ts';

export function record(minute: number, user = 'local'): ConversationRecord {
  return {
    conversation_id: newConversationId(),
    user,
    created_at: new Date(Date.UTC(2025, 0, 1, 0, minute)).toISOString(),
  };
}

export function conversationStoreContract(name: string, makeStore: () => Promise<ConversationStore>): void {
  describe(`${name} honours the ConversationStore contract`, () => {
    test('a record put can be got back by its conversation id', async () => {
      const store = await makeStore();
      const r = record(1);
      await store.put(r);
      expect(await store.get(r.conversation_id)).toEqual(r);
    });

    test('get of an unknown conversation returns undefined', async () => {
      const store = await makeStore();
      await store.put(record(1));
      expect(await store.get(newConversationId())).toBeUndefined();
    });

    test('put replaces the record of the same conversation', async () => {
      const store = await makeStore();
      const r = record(1);
      await store.put(r);
      await store.put({ ...r, user: 'alice' });
      expect(await store.get(r.conversation_id)).toEqual({ ...r, user: 'alice' });
      expect(await store.list()).toHaveLength(1);
    });

    test('list returns every record, oldest first', async () => {
      const store = await makeStore();
      expect(await store.list()).toEqual([]);
      const [late, early, middle] = [record(30), record(10), record(20)];
      for (const r of [late, early, middle]) await store.put(r);
      expect(await store.list()).toEqual([early, middle, late]);
    });

    test('delete removes the record from get and list, and deleting an unknown id is a no-op', async () => {
      const store = await makeStore();
      const [kept, gone] = [record(1), record(2)];
      await store.put(kept);
      await store.put(gone);
      await store.delete(gone.conversation_id);
      await store.delete(newConversationId());
      expect(await store.get(gone.conversation_id)).toBeUndefined();
      expect(await store.list()).toEqual([kept]);
    });

    test('a record changed by the caller after put is not changed in the store', async () => {
      const store = await makeStore();
      const r = record(1);
      await store.put(r);
      const copy = { ...r };
      r.user = 'mallory';
      expect(await store.get(copy.conversation_id)).toEqual(copy);
    });
  });
}
