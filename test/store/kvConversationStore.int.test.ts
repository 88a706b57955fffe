import { describe, expect, test } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { jetstreamManager } from '@nats-io/jetstream';
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
    const e = await store.put(entry(1, 'ada'));
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

  test('keys are u.<base64url(user)>.<id>, c.<user>, p.<user>.<page>, r.<user> and w.<id>', async () => {
    const bucket = freshBucket(nc);
    const store = await kvConversationStore(nc, { bucket });
    const e = await store.put(entry(1, 'ada lovelace'));
    await store.put({ ...e, state: 'running', in_memory: true, running_since: 1 }, e);
    await store.mark({ conversation_id: e.conversation_id, user: e.user, unsettled: true });
    const keys: string[] = [];
    for await (const key of await (await new Kvm(nc).open(bucket)).keys()) keys.push(key);
    const user = 'YWRhIGxvdmVsYWNl';
    expect(keys.sort()).toEqual(
      [`c.${user}`, `p.${user}.0`, `r.${user}`, `u.${user}.${e.conversation_id}`]
        .concat([`w.${e.conversation_id}`, 'x.order'])
        .sort(),
    );
  });

  test('a list while its entries are being rewritten misses none of them', async () => {
    const bucket = freshBucket(nc);
    const store = await kvConversationStore(nc, { bucket });
    const entries = await Promise.all(Array.from({ length: 200 }, (_, i) => store.put(entry(i))));
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
    const first = await kvConversationStore(nc, { bucket });
    const e = await first.put(entry(1));
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
    expect(await store.get('ada', 'old-one')).toEqual({ ...old, state: 'loading', in_memory: false, ordinal: 0 });
    expect(await store.get('bob', 'old-two')).toMatchObject({ user: 'bob' });
    expect(await store.get('bob', 'old-one')).toBeUndefined();
    expect((await store.markers()).map((m) => [m.conversation_id, m.user, m.unsettled]).sort()).toEqual([
      ['old-one', 'ada', true],
      ['old-two', 'bob', true],
    ]);
    expect(await kv.get('old-one').then((v) => v?.operation)).not.toBe('PUT');
    expect(await store.migrate()).toBe(0);
    // A migration cut short (old key still there, entry moved and since rewritten) keeps the entry.
    await store.put({ ...old, state: 'finished', in_memory: false, ordinal: 0 });
    await kv.put(old.conversation_id, JSON.stringify(old));
    expect(await store.migrate()).toBe(1);
    expect(await store.get('ada', 'old-one')).toMatchObject({ state: 'finished' });
  });

  test('entries written before the creation order get their places once, oldest first; old delete markers go', async () => {
    const bucket = freshBucket(nc);
    const kv = await new Kvm(nc).create(bucket, { history: 1 });
    const older = [entry(3), entry(1), entry(2)];
    for (const e of older)
      await kv.put(`u.${Buffer.from('local').toString('base64url')}.${e.conversation_id}`, JSON.stringify(e));
    // A delete marker an earlier version left: removed by the same one-time pass.
    await kv.put('w.gone', '{}');
    await kv.delete('w.gone');
    const store = await kvConversationStore(nc, { bucket });
    const info = await (await jetstreamManager(nc)).streams.info(`KV_${bucket}`, { subjects_filter: '>' });
    expect(Object.keys(info.state.subjects ?? {})).not.toContain(`$KV.${bucket}.w.gone`);
    const { items } = await store.list('local', { limit: 10 });
    expect(items.map((e) => e.created_at)).toEqual([older[0], older[2], older[1]].map((e) => e!.created_at));
    expect(items.map((e) => e.ordinal)).toEqual([2, 1, 0]);
    expect(await store.migrate()).toBe(0);
    expect((await store.list('local', { limit: 10 })).items).toEqual(items);
  });

  test('deleting every conversation leaves no message of any in the bucket: places, pages, keys all go', async () => {
    const bucket = freshBucket(nc);
    const store = await kvConversationStore(nc, { bucket });
    const written = [];
    for (let i = 0; i < 70; i++) written.push(await store.put(entry(i)));
    for (const e of written.slice(0, 3)) {
      await store.put({ ...e, state: 'running', in_memory: true, running_since: 1 }, e);
      await store.mark({ conversation_id: e.conversation_id, user: 'local', unsettled: true });
    }
    const jsm = await jetstreamManager(nc);
    const subjects = async () =>
      Object.keys((await jsm.streams.info(`KV_${bucket}`, { subjects_filter: '>' })).state.subjects ?? {}).sort();
    expect((await subjects()).filter((s) => s.includes('.p.'))).toHaveLength(2);
    for (const e of written.slice(1)) await store.delete('local', e.conversation_id);
    expect((await store.list('local', { limit: 10 })).items.map((e) => e.conversation_id)).toEqual([
      written[0]!.conversation_id,
    ]);
    await store.delete('local', written[0]!.conversation_id);
    const user = Buffer.from('local').toString('base64url');
    // What stays is per user, not per conversation: the counter and the (empty) running set.
    expect(await subjects()).toEqual([`$KV.${bucket}.c.${user}`, `$KV.${bucket}.r.${user}`, `$KV.${bucket}.x.order`]);
    expect((await jsm.streams.info(`KV_${bucket}`)).state.messages).toBe(3);
  });
});
