import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kvClusterStore, type KvClusterStore, type NatsConnection } from '../../src/store/index.ts';
import { connectTestNats, uniqueBucketName } from '../support/nats.ts';

let nc: NatsConnection;
let store: KvClusterStore;
const LEASE = 1_000;
const nodesBucket = uniqueBucketName();

beforeAll(async () => {
  nc = await connectTestNats();
  store = await kvClusterStore(nc, {
    leaseMs: LEASE,
    nodesBucket,
    ownersBucket: uniqueBucketName(),
  });
});
afterAll(async () => {
  await nc.close();
});

describe('the cluster state in KV', () => {
  it('claims by compare-and-set: one create wins, an update at a stale revision loses, a release at a stale revision keeps the record', async () => {
    const created = await Promise.all([
      store.claim('conv1', { node_id: 'a', generation: 1 }, null),
      store.claim('conv1', { node_id: 'b', generation: 1 }, null),
    ]);
    expect(created.filter((r) => r !== null)).toHaveLength(1);
    const read = (await store.owner('conv1'))!;
    expect(['a', 'b']).toContain(read.record.node_id);
    const next = await store.claim('conv1', { node_id: 'c', generation: 2 }, read.revision);
    expect(next).toBeGreaterThan(read.revision);
    expect(await store.claim('conv1', { node_id: 'd', generation: 2 }, read.revision)).toBeNull();
    expect(await store.release('conv1', read.revision)).toBe(false);
    expect((await store.owner('conv1'))?.record).toEqual({ node_id: 'c', generation: 2 });
    expect(await store.release('conv1', next!)).toBe(true);
    expect(await store.owner('conv1')).toBeNull();
    // A released conversation is claimed again by a create.
    expect(await store.claim('conv1', { node_id: 'a', generation: 3 }, null)).not.toBeNull();
  });

  it('a heartbeat ages out one lease after its last renewal; a node that leaves is gone at once', async () => {
    await store.beat({ node_id: 'x', started_at: new Date().toISOString() });
    await store.beat({ node_id: 'y', started_at: new Date().toISOString() });
    expect((await store.nodes()).sort()).toEqual(['x', 'y']);
    await store.leave('y');
    expect(await store.alive('y')).toBe(false);
    expect(await store.nodes()).toEqual(['x']);
    const start = performance.now();
    while ((await store.alive('x')) && performance.now() - start < 5 * LEASE)
      await new Promise((r) => setTimeout(r, 50));
    const agedOutAfter = performance.now() - start;
    expect(await store.alive('x')).toBe(false);
    expect(agedOutAfter).toBeGreaterThan(LEASE * 0.8);
    expect(agedOutAfter).toBeLessThan(LEASE * 2.5);
    expect(await store.nodes()).toEqual([]);
  });

  it('a heartbeat bucket lost with its nats-server is made again: the renewal after the failed one works', async () => {
    await jetstreamManager(nc).then((jsm) => jsm.streams.delete(`KV_${nodesBucket}`));
    await expect(store.beat({ node_id: 'z', started_at: new Date().toISOString() })).rejects.toThrow();
    await store.beat({ node_id: 'z', started_at: new Date().toISOString() });
    expect(await store.alive('z')).toBe(true);
  });
});
