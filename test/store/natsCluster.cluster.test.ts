import { setTimeout as sleep } from 'node:timers/promises';
import { jetstream, jetstreamManager, StorageType, type JetStreamClient } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { NatsConnection } from '../../src/store/index.ts';
import { connectNats } from '../../src/store/natsConnection.ts';
import { startNatsCluster, type NatsCluster } from '../support/natsCluster.ts';
import { uniqueStreamName, uniqueSubjectPrefix } from '../support/nats.ts';
import { eventually } from '../support/serverProcess.ts';

// Failure bounds: electing a new stream leader after a kill -9 takes 1-7 s here, catching up after the restart 2-7 s.
const PUBLISH_TIMEOUT_MS = 15_000;
const CATCH_UP_TIMEOUT_MS = 15_000;

/** Publishes until the stream acknowledges it; the message id makes a retry of a publish that landed a no-op. */
async function publishAcked(js: JetStreamClient, subject: string, n: number): Promise<void> {
  const deadline = Date.now() + PUBLISH_TIMEOUT_MS;
  for (;;) {
    try {
      await js.publish(subject, String(n), { msgID: `msg-${n}`, timeout: 1_000 });
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(100);
    }
  }
}

describe('a three-node nats-server cluster', () => {
  let cluster: NatsCluster;
  let nc: NatsConnection | undefined;

  beforeAll(async () => {
    cluster = await startNatsCluster();
  });

  afterAll(async () => {
    await nc?.close();
    await cluster?.stop();
  });

  test('keeps every message of an R3 stream once when the client’s server is killed and comes back', async () => {
    nc = await connectNats(cluster.url, { name: 'cluster-test' });
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    const stream = uniqueStreamName();
    const subject = `${uniqueSubjectPrefix()}.events`;
    await jsm.streams.add({ name: stream, subjects: [subject], storage: StorageType.File, num_replicas: 3 });

    for (let n = 0; n < 100; n++) await publishAcked(js, subject, n);
    const victim = nc.info?.server_name;
    expect(cluster.servers.map((server) => server.name)).toContain(victim);
    await cluster.kill(victim!);
    expect(cluster.servers.find((server) => server.name === victim)?.running).toBe(false);

    for (let n = 100; n < 200; n++) await publishAcked(js, subject, n);
    expect(nc.info?.server_name).not.toBe(victim);

    await cluster.restart(victim!);
    const info = await eventually(
      async () => {
        const si = await jsm.streams.info(stream);
        const peers = [si.cluster?.leader, ...(si.cluster?.replicas ?? []).map((replica) => replica.name)];
        const caughtUp = (si.cluster?.replicas ?? []).every((replica) => replica.current && !replica.offline);
        return peers.includes(victim) && si.cluster?.replicas?.length === 2 && caughtUp ? si : undefined;
      },
      `${victim} to rejoin ${stream} and catch up`,
      CATCH_UP_TIMEOUT_MS,
    );
    expect(info.state.messages).toBe(200);

    const payloads: number[] = [];
    for (let seq = 1; seq <= info.state.last_seq; seq++) {
      const msg = await jsm.streams.getMessage(stream, { seq });
      if (msg) payloads.push(Number(msg.string()));
    }
    expect(payloads.sort((a, b) => a - b)).toEqual(Array.from({ length: 200 }, (_, n) => n));
  });
});
