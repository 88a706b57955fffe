// The one behaviour every ConversationStore must have; each implementation's test file runs it.
import { describe, expect, test } from 'vitest';
import type { ConversationEntry, ConversationStore, WorkMarker } from '../../src/store/conversationStore.ts';
import { newConversationId } from './eventLogContract.ts';

export function entry(minute: number, user = 'local', conversationId = newConversationId()): ConversationEntry {
  return {
    conversation_id: conversationId,
    user,
    created_at: new Date(Date.UTC(2025, 0, 1, 0, minute)).toISOString(),
    state: 'awaiting_user_input',
    in_memory: false,
  };
}

const ids = (page: { items: ConversationEntry[] }) => page.items.map((e) => e.conversation_id);
const byId = (a: WorkMarker, b: WorkMarker) => (a.conversation_id < b.conversation_id ? -1 : 1);

export function conversationStoreContract(name: string, makeStore: () => Promise<ConversationStore>): void {
  describe(`${name} honours the ConversationStore contract`, () => {
    test('an entry put can be got back by its user and conversation id, and by no other user', async () => {
      const store = await makeStore();
      const e = entry(1, 'alice');
      await store.put(e);
      expect(await store.get('alice', e.conversation_id)).toEqual(e);
      expect(await store.get('bob', e.conversation_id)).toBeUndefined();
      expect(await store.get('alice', newConversationId())).toBeUndefined();
    });

    test('put replaces the entry of the same conversation', async () => {
      const store = await makeStore();
      const e = entry(1);
      await store.put(e);
      await store.put({ ...e, state: 'running', in_memory: true });
      expect(await store.get('local', e.conversation_id)).toEqual({ ...e, state: 'running', in_memory: true });
      expect((await store.list('local', { limit: 10 })).items).toHaveLength(1);
    });

    test("list returns only the user's entries, newest first, ties by greater id first", async () => {
      const store = await makeStore();
      expect(await store.list('local', { limit: 10 })).toEqual({ items: [], more: false });
      const [early, late, middle] = [entry(10), entry(30), entry(20)];
      const [tieA, tieB] = [entry(40, 'local', 'tie-a'), entry(40, 'local', 'tie-b')];
      for (const e of [early, late, tieA, middle, entry(50, 'bob'), tieB]) await store.put(e);
      expect(await store.list('local', { limit: 10 })).toEqual({
        items: [tieB, tieA, late, middle, early],
        more: false,
      });
      expect(ids(await store.list('bob', { limit: 10 }))).toHaveLength(1);
      expect(await store.list('carol', { limit: 10 })).toEqual({ items: [], more: false });
    });

    test('list pages: at most `limit` entries, then the ones after the last entry given back', async () => {
      const store = await makeStore();
      const all = [1, 2, 3, 4, 5].map((minute) => entry(minute));
      for (const e of all) await store.put(e);
      const newest = [...all].reverse();
      const first = await store.list('local', { limit: 2 });
      expect(first).toEqual({ items: newest.slice(0, 2), more: true });
      const second = await store.list('local', { limit: 2, after: first.items[1]! });
      expect(second).toEqual({ items: newest.slice(2, 4), more: true });
      const third = await store.list('local', { limit: 2, after: second.items[1]! });
      expect(third).toEqual({ items: newest.slice(4), more: false });
      // A page after an entry deleted meanwhile still starts at the right place.
      await store.delete('local', newest[1]!.conversation_id);
      expect(ids(await store.list('local', { limit: 2, after: newest[1]! }))).toEqual(
        ids({ items: newest.slice(2, 4) }),
      );
    });

    test('user names that are prefixes of one another, or hold dots and spaces, stay apart', async () => {
      const store = await makeStore();
      const users = ['al', 'alice', 'a.l', 'al ice', '*', '>', 'é'];
      for (const [i, user] of users.entries()) await store.put(entry(i, user));
      for (const user of users) {
        const { items } = await store.list(user, { limit: 10 });
        expect(items.map((e) => e.user)).toEqual([user]);
      }
    });

    test('delete removes the entry and the work marker, and deleting an unknown one is a no-op', async () => {
      const store = await makeStore();
      const [kept, gone] = [entry(1), entry(2)];
      await store.put(kept);
      await store.put(gone);
      await store.mark({ conversation_id: gone.conversation_id, user: 'local', unsettled: true });
      await store.delete('local', gone.conversation_id);
      await store.delete('local', newConversationId());
      expect(await store.get('local', gone.conversation_id)).toBeUndefined();
      expect(await store.list('local', { limit: 10 })).toEqual({ items: [kept], more: false });
      expect(await store.markers()).toEqual([]);
    });

    test('work markers are listed for every user, replaced by a new mark and gone after unmark', async () => {
      const store = await makeStore();
      expect(await store.markers()).toEqual([]);
      const a: WorkMarker = { conversation_id: newConversationId(), user: 'alice', unsettled: true };
      const b: WorkMarker = { conversation_id: newConversationId(), user: 'bob', unsettled: false };
      await store.mark(a);
      await store.mark(b);
      await store.put(entry(1, 'alice', a.conversation_id));
      expect((await store.markers()).sort(byId)).toEqual([a, b].sort(byId));
      await store.mark({ ...a, unsettled: false });
      await store.unmark(b.conversation_id);
      await store.unmark(newConversationId());
      expect(await store.markers()).toEqual([{ ...a, unsettled: false }]);
      // Markers are not entries, nor the other way round.
      expect(ids(await store.list('alice', { limit: 10 }))).toEqual([a.conversation_id]);
    });

    test('a value changed by the caller after put is not changed in the store', async () => {
      const store = await makeStore();
      const e = entry(1);
      await store.put(e);
      const copy = { ...e };
      e.state = 'error';
      expect(await store.get('local', copy.conversation_id)).toEqual(copy);
    });
  });
}
