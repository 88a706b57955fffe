import { afterAll, beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { kvConversationStore } from '../../src/store/kvConversationStore.ts';
import type { NatsConnection } from '../../src/store/index.ts';
import { connectTestNats, uniqueBucketName } from '../support/nats.ts';
import { conversationStoreContract, record } from './conversationStoreContract.ts';

let nc: NatsConnection;
beforeAll(async () => {
  nc = await connectTestNats();
});
afterAll(() => nc.close());

async function freshBucket(): Promise<string> {
  const bucket = uniqueBucketName();
  onTestFinished(async () => {
    await (await new Kvm(nc).open(bucket)).destroy();
  });
  return bucket;
}

conversationStoreContract('KvConversationStore', async () => kvConversationStore(nc, { bucket: await freshBucket() }));

describe('KvConversationStore', () => {
  test('a bucket value that is not a conversation record makes get fail instead of passing it on', async () => {
    const bucket = await freshBucket();
    const store = await kvConversationStore(nc, { bucket });
    const r = record(1);
    const kv = await new Kvm(nc).open(bucket);
    await kv.put(r.conversation_id, JSON.stringify({ conversation_id: r.conversation_id, user: 42 }));
    await expect(store.get(r.conversation_id)).rejects.toThrow(/is invalid/);
    await kv.put(r.conversation_id, 'not json');
    await expect(store.get(r.conversation_id)).rejects.toThrow(/not JSON/);
  });

  test('reopening the bucket finds the records written before', async () => {
    const bucket = await freshBucket();
    const r = record(1);
    await (await kvConversationStore(nc, { bucket })).put(r);
    expect(await (await kvConversationStore(nc, { bucket })).get(r.conversation_id)).toEqual(r);
  });
});
