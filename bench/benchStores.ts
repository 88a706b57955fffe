// Every Tether a bench builds keeps its events on stream and bucket names of its
// own (fresh per run), deleted afterwards: the same nats-server serves every step.
import { jetstreamManager } from '@nats-io/jetstream';
import { jetStreamStores, type JetStreamStoreNames, type NatsConnection, type Stores } from '../src/store/index.ts';

export type BenchStoreNames = Required<JetStreamStoreNames>;

/** Names for bench step `name` in the run tagged `tag`. */
export function benchStoreNames(name: string, tag: string): BenchStoreNames {
  return {
    stream: `BENCH_${name.toUpperCase()}_${tag}`,
    subjectPrefix: `bench.${name}${tag}`,
    conversationBucket: `bench_${name}_conversations_${tag}`,
    snapshotBucket: `bench_${name}_snapshots_${tag}`,
    checkpointBucket: `bench_${name}_checkpoints_${tag}`,
  };
}

/** Deletes the stream and the buckets (whatever uses them must be stopped first). */
export async function deleteBenchStores(nc: NatsConnection, names: BenchStoreNames): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const buckets = [names.conversationBucket, names.snapshotBucket, names.checkpointBucket];
  for (const stream of [names.stream, ...buckets.map((bucket) => `KV_${bucket}`)]) {
    await jsm.streams.delete(stream).catch(() => false);
  }
}

export interface BenchStores {
  stores: Stores;
  /** Deletes the stream and buckets (the Tether on them must be closed first). */
  dispose: () => Promise<void>;
}

/** The JetStream stores on names of their own for bench step `name`. */
export async function benchStores(nc: NatsConnection, name: string, tag: string): Promise<BenchStores> {
  const names = benchStoreNames(name, tag);
  const dispose = () => deleteBenchStores(nc, names);
  try {
    return { stores: await jetStreamStores(nc, names), dispose };
  } catch (err) {
    await dispose();
    throw err;
  }
}
