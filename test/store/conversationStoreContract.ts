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

const asPosition = (e: ConversationEntry) => ({ ordinal: e.ordinal!, conversation_id: e.conversation_id });
const ids = (page: { items: ConversationEntry[] }) => page.items.map((e) => e.conversation_id);
const byId = (a: WorkMarker, b: WorkMarker) => (a.conversation_id < b.conversation_id ? -1 : 1);

export function conversationStoreContract(name: string, makeStore: () => Promise<ConversationStore>): void {
  describe(`${name} honours the ConversationStore contract`, () => {
    test('an entry put can be got back by its user and conversation id, and by no other user', async () => {
      const store = await makeStore();
      const e = entry(1, 'alice');
      const written = await store.put(e);
      expect(written).toEqual({ ...e, ordinal: 0 });
      expect(await store.get('alice', e.conversation_id)).toEqual(written);
      expect(await store.get('bob', e.conversation_id)).toBeUndefined();
      expect(await store.get('alice', newConversationId())).toBeUndefined();
    });

    test('put replaces the entry of the same conversation, which keeps its place', async () => {
      const store = await makeStore();
      const written = await store.put(entry(1));
      await store.put(entry(2));
      const again = await store.put({ ...written, state: 'running', in_memory: true });
      expect(again).toEqual({ ...written, state: 'running', in_memory: true });
      expect(await store.get('local', written.conversation_id)).toEqual(again);
      expect((await store.list('local', { limit: 10 })).items.map((e) => e.ordinal)).toEqual([1, 0]);
    });

    test("list returns only the user's entries, newest first by creation (the order they were first put)", async () => {
      const store = await makeStore();
      expect(await store.list('local', { limit: 10 })).toEqual({ items: [], more: false });
      const written = [];
      for (const e of [entry(10), entry(30), entry(50, 'bob'), entry(20)]) written.push(await store.put(e));
      const [early, late, bob, middle] = written;
      expect(await store.list('local', { limit: 10 })).toEqual({ items: [middle, late, early], more: false });
      expect(await store.list('bob', { limit: 10 })).toEqual({ items: [bob], more: false });
      expect(await store.list('carol', { limit: 10 })).toEqual({ items: [], more: false });
    });

    test('list pages: at most `limit` entries, then the ones after the last entry given back', async () => {
      const store = await makeStore();
      const all = [];
      for (const minute of [1, 2, 3, 4, 5]) all.push(await store.put(entry(minute)));
      const newest = [...all].reverse();
      const first = await store.list('local', { limit: 2 });
      expect(first).toEqual({ items: newest.slice(0, 2), more: true });
      const second = await store.list('local', { limit: 2, after: asPosition(first.items[1]!) });
      expect(second).toEqual({ items: newest.slice(2, 4), more: true });
      const third = await store.list('local', { limit: 2, after: asPosition(second.items[1]!) });
      expect(third).toEqual({ items: newest.slice(4), more: false });
      // A page after an entry deleted meanwhile still starts at the right place.
      await store.delete('local', newest[1]!.conversation_id);
      expect(ids(await store.list('local', { limit: 2, after: asPosition(newest[1]!) }))).toEqual(
        ids({ items: newest.slice(2, 4) }),
      );
    });

    test('running lists the conversations whose entry says running in memory, until it says otherwise or goes', async () => {
      const store = await makeStore();
      const [a, b] = [await store.put(entry(1)), await store.put(entry(2))];
      await store.put(entry(3, 'bob'));
      expect(await store.running('local')).toEqual([]);
      await store.put({ ...a, state: 'running', in_memory: true, running_since: 100 }, a);
      await store.put({ ...b, state: 'running', in_memory: true, running_since: 200 }, b);
      const byRunning = (all: { running_since: number }[]) => all.sort((x, y) => x.running_since - y.running_since);
      expect(byRunning(await store.running('local'))).toEqual([
        { conversation_id: a.conversation_id, running_since: 100 },
        { conversation_id: b.conversation_id, running_since: 200 },
      ]);
      expect(await store.running('bob')).toEqual([]);
      const runningA = { ...a, state: 'running' as const, in_memory: true, running_since: 100 };
      // Passivated while running: its spell goes on, but it runs nowhere.
      await store.put({ ...runningA, in_memory: false }, runningA);
      expect(await store.running('local')).toEqual([{ conversation_id: b.conversation_id, running_since: 200 }]);
      await store.put(runningA, { ...runningA, in_memory: false });
      await store.put({ ...runningA, state: 'awaiting_user_input' }, runningA);
      await store.delete('local', b.conversation_id);
      expect(await store.running('local')).toEqual([]);
    });

    test('a delete under way is recorded until it ends', async () => {
      const store = await makeStore();
      expect(await store.deletions()).toEqual([]);
      const record = { conversation_id: newConversationId(), user: 'ada', keep_workspace: true };
      await store.beginDelete(record);
      expect(await store.deletions()).toEqual([record]);
      await store.endDelete(record.conversation_id);
      await store.endDelete(newConversationId());
      expect(await store.deletions()).toEqual([]);
    });

    test('user names that are prefixes of one another, or hold dots and spaces, stay apart', async () => {
      const store = await makeStore();
      const users = ['al', 'alice', 'a.l', 'al ice', '*', '>', 'é'];
      for (const [i, user] of users.entries()) await store.put(entry(i, user));
      for (const user of users) expect(await store.running(user)).toEqual([]);
      for (const user of users) {
        const { items } = await store.list(user, { limit: 10 });
        expect(items.map((e) => e.user)).toEqual([user]);
      }
    });

    test('delete removes the entry and the work marker, and deleting an unknown one is a no-op', async () => {
      const store = await makeStore();
      const kept = await store.put(entry(1));
      const gone = await store.put(entry(2));
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
      const e = await store.put(entry(1));
      const copy = { ...e };
      e.state = 'error';
      expect(await store.get('local', copy.conversation_id)).toEqual(copy);
    });
  });
}
