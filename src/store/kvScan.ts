import { DeliverPolicy, type JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { OrderedConsumers } from './orderedConsumers.ts';

/** Scan consumers are dropped by the server this long after a lost delete. */
const SCAN_CONSUMER_IDLE_MS = 60_000;
/** A scan that receives nothing for this long stops; the keys it did not reach are read one by one. */
const SCAN_STALL_MS = 5_000;
/** Gets at once for the keys a scan did not reach. */
const FILL_CONCURRENCY = 16;

export interface KvValue {
  key: string;
  value: Uint8Array;
}

export interface KvScanDeps {
  consumers: OrderedConsumers;
  jsm: JetStreamManager;
  kv: KV;
  bucket: string;
  maxBytes: number;
}

/**
 * The current value of every key under `keyPrefix` in a KV bucket. The key set
 * is the stream's subject index at the start (one stream info request, exact);
 * the values come from one ordered consumer instead of one get per key (it
 * delivers every message: the bucket keeps one per key; nats-server 2.9.10's
 * last-per-subject delivery stalls short of the end). A key
 * rewritten during the scan loses its message and gains one at the stream's
 * end, which a scan racing a busy writer may not reach: every key of the set
 * the scan did not settle is read with a get. Deleted and purged keys are left out.
 */
export async function scanKv(deps: KvScanDeps, keyPrefix: string): Promise<KvValue[]> {
  const all = await scanKvWithDeletes(deps, keyPrefix);
  return all.flatMap(({ key, value }) => (value === null ? [] : [{ key, value }]));
}

/** As `scanKv`, with deleted and purged keys too (value null), each with the revision read. */
export async function scanKvWithDeletes(
  deps: KvScanDeps,
  keyPrefix: string,
): Promise<Array<{ key: string; value: Uint8Array | null; revision: number }>> {
  const subjectPrefix = `$KV.${deps.bucket}.`;
  const filter = `${subjectPrefix}${keyPrefix}>`;
  const stream = `KV_${deps.bucket}`;
  const info = await deps.jsm.streams.info(stream, { subjects_filter: filter });
  const keys = Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(subjectPrefix.length));
  if (keys.length === 0) return [];
  // A few keys (a user's running set, usually) cost fewer round trips as gets than as a consumer.
  const found =
    keys.length <= FILL_CONCURRENCY
      ? new Map<string, { value: Uint8Array | null; revision: number }>()
      : await streamValues(deps, stream, filter, subjectPrefix, new Set(keys), info.state.last_seq);
  const missing = keys.filter((key) => !found.has(key));
  for (let i = 0; i < missing.length; i += FILL_CONCURRENCY) {
    const batch = missing.slice(i, i + FILL_CONCURRENCY);
    const entries = await Promise.all(batch.map((key) => deps.kv.get(key)));
    entries.forEach((entry, j) =>
      found.set(batch[j]!, { value: entry?.operation === 'PUT' ? entry.value : null, revision: entry?.revision ?? 0 }),
    );
  }
  return [...found].map(([key, read]) => ({ key, ...read }));
}

/**
 * Values (null: deleted) of the keys the consumer delivered, stopping once
 * every key of `wanted` was seen or the stream's end at the start is reached
 * (a writer rewriting keys ahead of the scan would otherwise keep it going).
 */
async function streamValues(
  deps: KvScanDeps,
  stream: string,
  filter: string,
  subjectPrefix: string,
  wanted: ReadonlySet<string>,
  endSeq: number,
): Promise<Map<string, { value: Uint8Array | null; revision: number }>> {
  const values = new Map<string, { value: Uint8Array | null; revision: number }>();
  const consumer = await deps.consumers.get(stream, {
    filter_subjects: filter, // a string: 2.9 has no multi-filter consumers
    deliver_policy: DeliverPolicy.All,
    inactive_threshold: SCAN_CONSUMER_IDLE_MS,
  });
  try {
    if ((await consumer.info(true)).num_pending === 0) return values;
    const messages = await consumer.consume({ max_bytes: deps.maxBytes });
    let seen = 0;
    let settled = 0;
    let progress = -1;
    const stall = setInterval(() => {
      if (seen === progress) messages.stop();
      progress = seen;
    }, SCAN_STALL_MS);
    try {
      for await (const m of messages) {
        seen += 1;
        const key = m.subject.slice(subjectPrefix.length);
        if (wanted.has(key) && !values.has(key)) settled += 1;
        const op = m.headers?.get('KV-Operation');
        values.set(key, { value: op === 'DEL' || op === 'PURGE' ? null : m.data, revision: m.seq });
        // Past the stream's end at the start, everything is a rewrite the gets will read.
        if (settled === wanted.size || m.info.pending === 0 || m.seq >= endSeq) break;
      }
    } finally {
      clearInterval(stall);
      messages.stop();
    }
    return values;
  } finally {
    consumer.delete().catch(() => {});
  }
}
