import { describe, expect, test } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { kvCheckpointStore, type NatsConnection } from '../../src/store/index.ts';
import { freshBucket, useTestNats } from '../support/nats.ts';
import { checkpointStoreContract } from './checkpointStoreContract.ts';
import { snapshotRecord } from './snapshotStoreContract.ts';

let nc: NatsConnection;
useTestNats((connected) => (nc = connected));

checkpointStoreContract('KvCheckpointStore', async () => kvCheckpointStore(nc, { bucket: freshBucket(nc) }));

describe('KvCheckpointStore', () => {
  test('keeps each checkpoint under <conversation>.<seq>; a value that is not a record reads as none', async () => {
    const bucket = freshBucket(nc);
    const store = await kvCheckpointStore(nc, { bucket });
    const r = snapshotRecord(12);
    await store.put(r);
    const kv = await new Kvm(nc).open(bucket);
    expect((await kv.get(`${r.conversation_id}.12`))?.json()).toEqual(r);
    await kv.put(`${r.conversation_id}.20`, 'not json');
    expect(await store.before(r.conversation_id, 21)).toBeUndefined();
    await kv.put(`${r.conversation_id}.20`, JSON.stringify({ ...r, seq: 'twenty' }));
    expect(await store.before(r.conversation_id, 21)).toBeUndefined();
    expect(await store.before(r.conversation_id, 20)).toEqual(r);
  });
});
