import { describe, expect, test } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { kvSnapshotStore, type NatsConnection } from '../../src/store/index.ts';
import { freshBucket, useTestNats } from '../support/nats.ts';
import { snapshotRecord, snapshotStoreContract } from './snapshotStoreContract.ts';

let nc: NatsConnection;
useTestNats((connected) => (nc = connected));

snapshotStoreContract('KvSnapshotStore', async () => kvSnapshotStore(nc, { bucket: freshBucket(nc) }));

describe('KvSnapshotStore', () => {
  test('a bucket value that is not a snapshot record reads as no snapshot, so the log is folded instead', async () => {
    const bucket = freshBucket(nc);
    const store = await kvSnapshotStore(nc, { bucket });
    const r = snapshotRecord();
    const kv = await new Kvm(nc).open(bucket);
    await kv.put(r.conversation_id, JSON.stringify({ ...r, seq: 'seven' }));
    expect(await store.get(r.conversation_id)).toBeUndefined();
    await kv.put(r.conversation_id, 'not json');
    expect(await store.get(r.conversation_id)).toBeUndefined();
  });
});
