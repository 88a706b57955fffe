import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureEventStream } from '../../src/store/natsConnection.ts';
import { kvClusterStore, openBucket, StoreSettingsError, type NatsConnection } from '../../src/store/index.ts';
import { connectTestNats, uniqueBucketName, uniqueStreamName, uniqueSubjectPrefix } from '../support/nats.ts';

let nc: NatsConnection;
beforeAll(async () => {
  nc = await connectTestNats();
});
afterAll(() => nc?.close());

async function refusal(promise: Promise<unknown>): Promise<StoreSettingsError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreSettingsError);
  return err as StoreSettingsError;
}

describe('the settings of streams and buckets at start', () => {
  it("bring an existing bucket's TTL to the configured one (Kvm.create alone keeps the old one)", async () => {
    const bucket = uniqueBucketName();
    await openBucket(nc, bucket, { ttlMs: 1_000 });
    const kept = await new Kvm(nc).create(bucket, { history: 1, ttl: 2_000 });
    expect((await kept.status()).ttl).toBe(1_000);

    const kv = await openBucket(nc, bucket, { ttlMs: 2_000 });
    expect((await kv.status()).ttl).toBe(2_000);
    expect((await kv.status()).replicas).toBe(1);
    // Lower again: the dedupe window (the old TTL) follows it down, or JetStream refuses (10052).
    expect((await (await openBucket(nc, bucket, { ttlMs: 500 })).status()).ttl).toBe(500);
  });

  it('refuse a lease other than the heartbeat TTL while a heartbeat is current, and take it once none is', async () => {
    const nodesBucket = uniqueBucketName();
    const store = await kvClusterStore(nc, { leaseMs: 1_000, nodesBucket, ownersBucket: uniqueBucketName() });
    await store.beat({ node_id: 'n1', started_at: new Date().toISOString() });
    const refused = await refusal(
      kvClusterStore(nc, { leaseMs: 3_000, nodesBucket, ownersBucket: uniqueBucketName() }),
    );
    expect(refused).toMatchObject({ setting: 'ttl', waitable: true });
    expect(refused.message).toMatch(
      /ttl 1000 ms, configured 3000 ms; 1 node\(s\) with that lease have a current heartbeat/,
    );
    await store.leave('n1');
    await kvClusterStore(nc, { leaseMs: 3_000, nodesBucket, ownersBucket: uniqueBucketName() });
    const info = await (await jetstreamManager(nc)).streams.info(`KV_${nodesBucket}`);
    expect(info.config.max_age).toBe(3_000 * 1e6);
  });

  it('refuse more replicas than a single server has, naming the bucket or stream and the setting', async () => {
    const bucket = uniqueBucketName();
    const created = await refusal(openBucket(nc, bucket, { replicas: 3 }));
    expect(created).toMatchObject({ setting: 'replicas', stream: `the bucket ${bucket}` });

    await openBucket(nc, bucket, { replicas: 1 });
    const updated = await refusal(openBucket(nc, bucket, { replicas: 3 }));
    expect(updated).toMatchObject({ setting: 'replicas', stream: `KV_${bucket}` });
    expect(updated.message).toMatch(/replicas 1, configured 3; NATS refused: replicas > 1 not supported/);

    const jsm = await jetstreamManager(nc);
    const stream = uniqueStreamName();
    const options = { stream, subjectPrefix: uniqueSubjectPrefix() };
    await ensureEventStream(jsm, options);
    const onStream = await refusal(ensureEventStream(jsm, { ...options, replicas: 2 }));
    expect(onStream).toMatchObject({ setting: 'replicas', stream });
    expect((await jsm.streams.info(stream)).config.num_replicas).toBe(1);
    await jsm.streams.delete(stream);
  });
});
