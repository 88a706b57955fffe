import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import { beforeAll, describe, expect, it } from 'vitest';
import { connectNats } from '../../src/store/natsConnection.ts';
import { useE2e } from '../support/e2e.ts';
import type { NatsCluster } from '../support/natsCluster.ts';

const e2e = useE2e();
let nats: NatsCluster;

beforeAll(async () => {
  nats = await e2e.natsCluster();
});

describe('a node started beside a NATS cluster that is still forming', () => {
  it('waits for JetStream to place its replicas, then starts with the stream and buckets at TETHER_REPLICAS', async () => {
    const [, second, third] = nats.servers.map((server) => server.name);
    await nats.kill(second!);
    await nats.kill(third!);
    // One server of three: no JetStream leader, no room for three replicas. The node must wait, not exit,
    // past the 5 s a JetStream request waits for its answer (so at least one attempt fails and is made again).
    const starting = e2e.start({ env: { NATS_URL: nats.url, TETHER_REPLICAS: '3', TETHER_LEASE_MS: '1000' } });
    const early = await Promise.race([starting.then(() => 'started' as const), sleep(6_500).then(() => 'waiting')]);
    expect(early).toBe('waiting');
    await Promise.all([nats.restart(second!), nats.restart(third!)]);
    const node = await starting;
    expect(node.stderr()).toContain('waiting for JetStream');

    const nc = await connectNats(nats.url, { name: 'cluster-start-test' });
    try {
      const jsm = await jetstreamManager(nc);
      const streams = ['TETHER_EVENTS', 'KV_tether_conversations', 'KV_tether_snapshots', 'KV_tether_nodes'];
      streams.push('KV_tether_owners');
      const replicas = await Promise.all(streams.map(async (s) => (await jsm.streams.info(s)).config.num_replicas));
      expect(replicas).toEqual([3, 3, 3, 3, 3]);
    } finally {
      await nc.close();
    }
  });
});
