// What nats-server itself stalls during the rolling restart of test/e2e/rollingRestart.cluster.test.ts, without
// Tether: 12 raw JetStream publishers (nats.js, each on its own subject of a 3-replica stream, a message every
// 50-150 ms with a msg id, sent again with it 100 ms after a failure or after TIMEOUT_MS without an answer,
// which bounds what a publish lost with a dropped connection adds: nats.js does not send it again) while each
// nats-server of a 3-node cluster has its stream leaderships moved off, stops (SIGTERM; lame duck then SIGKILL;
// SIGTERM) and starts again, its replicas current before the next. Prints the longest wait between two
// acknowledgements of any publisher, per run. Run: `npx tsx bench/natsRestartRaw.ts [runs]` (about 40 s a run).
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { moveLeadersOff, startNatsCluster, untilReplicasCurrent } from '../test/support/natsCluster.ts';

const PUBLISHERS = 12;
const TIMEOUT_MS = Number(process.env.TIMEOUT_MS ?? 500);
const STOPS = ['SIGTERM', 'lame duck', 'SIGTERM'] as const;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function run(): Promise<{ longestMs: number; acks: number; failures: number }> {
  const cluster = await startNatsCluster({ monitor: true });
  try {
    const nc = await connect({ servers: cluster.urls, maxReconnectAttempts: -1, reconnectTimeWait: 1000 });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'RAW', subjects: ['raw.*'], storage: StorageType.File, num_replicas: 3 });
    // As a node writes its conversation index: with WITH_KV=1 each message is followed by a put to a 3-replica bucket.
    if (process.env.WITH_KV) await new Kvm(nc).create('raw', { replicas: 3 });
    const kv = process.env.WITH_KV ? await new Kvm(jetstream(nc, { timeout: TIMEOUT_MS })).open('raw') : undefined;
    await untilReplicasCurrent(cluster);
    const js = jetstream(nc, { timeout: TIMEOUT_MS });
    let [sending, failures] = [true, 0];
    const acks: number[][] = [];
    const publisher = async (p: number) => {
      const times: number[] = (acks[p] = []);
      let n = 0;
      while (sending) {
        const msgID = `p${p}-${n}`;
        try {
          await js.publish(`raw.p${p}`, `message ${n}`, { msgID });
          await kv?.put(`p${p}`, `message ${n}`);
          n += 1;
          times.push(Date.now());
          await sleep(50 + Math.random() * 100);
        } catch {
          failures += 1;
          await sleep(100);
        }
      }
    };
    const running = Array.from({ length: PUBLISHERS }, (_, p) => publisher(p));
    await sleep(1_000);
    const from = Date.now();
    for (const [i, stop] of STOPS.entries()) {
      const server = cluster.servers[i]!;
      await moveLeadersOff(cluster, server);
      if (stop === 'lame duck') {
        cluster.signal(server.name, 'SIGUSR2');
        await sleep(500);
      }
      // In lame-duck mode it may have gone by itself already.
      if (server.running) await cluster.kill(server.name, stop === 'lame duck' ? 'SIGKILL' : 'SIGTERM');
      await cluster.restart(server.name);
      await untilReplicasCurrent(cluster);
    }
    await sleep(1_000);
    sending = false;
    await Promise.all(running);
    const to = Date.now();
    const longestMs = Math.max(
      ...acks.map((times) => {
        let [longest, previous] = [0, from];
        for (const at of [...times.filter((t) => t >= from), to])
          [longest, previous] = [Math.max(longest, at - previous), at];
        return longest;
      }),
    );
    await nc.close();
    return { longestMs, acks: acks.reduce((a, t) => a + t.length, 0), failures };
  } finally {
    await cluster.stop();
  }
}

const runs = Number(process.argv[2] ?? 3);
for (let i = 1; i <= runs; i++) console.log(`run ${i} (timeout ${TIMEOUT_MS} ms): ${JSON.stringify(await run())}`);
