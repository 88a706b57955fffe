// Baseline: raw JetStream with nats.js v3, as another program would use it on
// the bench's own connection: async publish of the same payloads, an ordered
// consumer read with JSON.parse, and a KV get plus a direct get.
import { performance } from 'node:perf_hooks';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { ensureEventStream, subjectFor, type NatsConnection } from '../../src/store/index.ts';
import { timed, within, type Timed } from '../harness/measure.ts';

/**
 * The same payloads published with `js.publish` without awaiting each, one
 * subject per conversation of a fresh stream with the event stream's settings
 * (conversations interleaved as in Tether's run), then every ack awaited.
 */
export async function rawPublish(nc: NatsConnection, payloads: string[][], tag: string): Promise<Timed<number>> {
  const stream = `BENCH_RAW_${tag}`;
  const jsm = await jetstreamManager(nc);
  await ensureEventStream(jsm, { stream, subjectPrefix: `bench.raw${tag}` });
  const js = jetstream(nc);
  const subjects = payloads.map((_, i) => subjectFor(`bench.raw${tag}`, `c${i}`));
  const longest = Math.max(...payloads.map((p) => p.length));
  try {
    const t = await timed(async () => {
      const acks: Array<Promise<unknown>> = [];
      for (let n = 0; n < longest; n++)
        payloads.forEach((list, i) => list[n] !== undefined && acks.push(js.publish(subjects[i]!, list[n])));
      await within(60_000, 'raw publish acks', Promise.all(acks));
      return acks.length;
    });
    const held = (await jsm.streams.info(stream)).state.messages;
    if (held !== t.value) throw new Error(`the raw stream holds ${held} messages, ${t.value} were published`);
    return t;
  } finally {
    await jsm.streams.delete(stream).catch(() => false);
  }
}

/**
 * What a program following one subject writes with nats.js v3: an ordered
 * consumer (a string filter: nats-server 2.9 has no list), pulls bounded to
 * 8 MiB, consumed until nothing is pending, each message JSON-parsed.
 */
export async function rawRead(
  nc: NatsConnection,
  stream: string,
  subject: string,
): Promise<{ ms: number; count: number }> {
  const t0 = performance.now();
  const consumer = await jetstream(nc).consumers.get(stream, { filter_subjects: subject });
  const messages = await consumer.consume({ max_bytes: 8 * 2 ** 20 });
  let count = 0;
  for await (const m of messages) {
    JSON.parse(m.string());
    count++;
    if (m.info.pending === 0) break;
  }
  const ms = performance.now() - t0;
  consumer.delete().catch(() => undefined);
  return { ms, count };
}

/** The two reads a snapshot load cannot avoid: the snapshot's KV entry (parsed), then the subject's last message. */
export async function rawSnapshotRead(
  nc: NatsConnection,
  bucket: string,
  stream: string,
  subject: string,
  key: string,
) {
  const kv = await new Kvm(nc).open(bucket);
  const jsm = await jetstreamManager(nc);
  const t0 = performance.now();
  const record = (await kv.get(key))?.json<{ seq: number }>();
  const last = await jsm.direct.getMessage(stream, { last_by_subj: subject });
  const ms = performance.now() - t0;
  if (!record || last?.seq !== record.seq)
    throw new Error(`raw reads: snapshot at ${record?.seq}, last message at ${last?.seq}`);
  return ms;
}
