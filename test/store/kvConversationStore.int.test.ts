import { describe, expect, test } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { kvConversationStore } from '../../src/store/kvConversationStore.ts';
import type { NatsConnection } from '../../src/store/index.ts';
import { freshBucket, useTestNats } from '../support/nats.ts';
import { conversationStoreContract, entry } from './conversationStoreContract.ts';

let nc: NatsConnection;
useTestNats((connected) => (nc = connected));

conversationStoreContract('KvConversationStore', async () => kvConversationStore(nc, { bucket: freshBucket(nc) }));

describe('KvConversationStore', () => {
  test('a bucket value that is not an entry makes get and list fail instead of passing it on', async () => {
    const bucket = freshBucket(nc);
    const store = await kvConversationStore(nc, { bucket });
    const e = entry(1, 'ada');
    const kv = await new Kvm(nc).open(bucket);
    const key = `u.${Buffer.from('ada').toString('base64url')}.${e.conversation_id}`;
    await kv.put(key, JSON.stringify({ ...e, state: 'dancing' }));
    await expect(store.get('ada', e.conversation_id)).rejects.toThrow(/is invalid/);
    await expect(store.list('ada', { limit: 10 })).rejects.toThrow(/is invalid/);
    await kv.put(key, 'not json');
    await expect(store.get('ada', e.conversation_id)).rejects.toThrow(/not JSON/);
    // An entry under one user's key that names another user is refused too.
    await kv.put(key, JSON.stringify({ ...e, user: 'mallory' }));
    await expect(store.get('ada', e.conversation_id)).rejects.toThrow(/another conversation or user/);
  });

  test('keys are u.<base64url(user)>.<id> and w.<id>', async () => {
    const bucket = freshBucket(nc);
    const store = await kvConversationStore(nc, { bucket });
    const e = entry(1, 'ada lovelace');
    await store.put(e);
    await store.mark({ conversation_id: e.conversation_id, user: e.user, unsettled: true });
    const keys: string[] = [];
    for await (const key of await (await new Kvm(nc).open(bucket)).keys()) keys.push(key);
    expect(keys.sort()).toEqual([`u.YWRhIGxvdmVsYWNl.${e.conversation_id}`, `w.${e.conversation_id}`]);
  });

  test('a list while its entries are being rewritten misses none of them', async () => {
    const bucket = freshBucket(nc);
    const store = await kvConversationStore(nc, { bucket });
    const entries = Array.from({ length: 200 }, (_, i) => entry(i));
    await Promise.all(entries.map((e) => store.put(e)));
    let rewriting = true;
    const rewrites = (async () => {
      for (let round = 0; rewriting; round++) {
        await Promise.all(entries.map((e) => store.put({ ...e, in_memory: round % 2 === 0 })));
      }
    })();
    try {
      for (let i = 0; i < 5; i++) expect((await store.list('local', { limit: 1000 })).items).toHaveLength(200);
    } finally {
      rewriting = false;
      await rewrites;
    }
  });

  test('reopening the bucket finds the entries and markers written before', async () => {
    const bucket = freshBucket(nc);
    const e = entry(1);
    const first = await kvConversationStore(nc, { bucket });
    await first.put(e);
    await first.mark({ conversation_id: e.conversation_id, user: e.user, unsettled: false });
    const again = await kvConversationStore(nc, { bucket });
    expect(await again.get('local', e.conversation_id)).toEqual(e);
    expect(await again.markers()).toEqual([{ conversation_id: e.conversation_id, user: 'local', unsettled: false }]);
  });

  test('opening moves records of the old layout (key = id) into the user index, with a marker recovery reads', async () => {
    const bucket = freshBucket(nc);
    const kv = await new Kvm(nc).create(bucket, { history: 1 });
    const old = { conversation_id: 'old-one', user: 'ada', created_at: '2025-01-01T00:00:00.000Z' };
    await kv.put(old.conversation_id, JSON.stringify(old));
    await kv.put('old-two', JSON.stringify({ ...old, conversation_id: 'old-two', user: 'bob' }));
    const store = await kvConversationStore(nc, { bucket });
    expect(await store.get('ada', 'old-one')).toEqual({ ...old, state: 'loading', in_memory: false });
    expect(await store.get('bob', 'old-two')).toMatchObject({ user: 'bob' });
    expect(await store.get('bob', 'old-one')).toBeUndefined();
    expect((await store.markers()).map((m) => [m.conversation_id, m.user, m.unsettled]).sort()).toEqual([
      ['old-one', 'ada', true],
      ['old-two', 'bob', true],
    ]);
    expect(await kv.get('old-one').then((v) => v?.operation)).not.toBe('PUT');
    expect(await store.migrate()).toBe(0);
    // A migration cut short (old key still there, entry moved and since rewritten) keeps the entry.
    await store.put({ ...old, state: 'finished', in_memory: false });
    await kv.put(old.conversation_id, JSON.stringify(old));
    expect(await store.migrate()).toBe(1);
    expect(await store.get('ada', 'old-one')).toMatchObject({ state: 'finished' });
  });
});
