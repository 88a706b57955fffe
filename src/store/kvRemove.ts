import { Bucket, type KV } from '@nats-io/kv';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';

/**
 * Removes a KV key with nothing left behind: a purge of the key's subject in
 * the bucket's stream, so no delete marker stays (a KV delete or purge writes
 * one, kept until the bucket compacts, and every listing of the prefix reads
 * it). With `throughRevision`, only messages up to that revision go: a value
 * written after it stays (the compare-and-set a removal of a shared key needs).
 */
export async function removeKey(kv: KV, key: string, throughRevision?: number): Promise<void> {
  if (!(kv instanceof Bucket)) throw new TypeError('a KV bucket of @nats-io/kv is needed');
  const filter = `${kv.prefix}.${key}`;
  await kv.jsm.streams.purge(
    kv.stream,
    throughRevision === undefined ? { filter } : { filter, seq: throughRevision + 1 },
  );
}

/** Another writer changed the key first (a compare-and-set lost). */
export function isWrongLastSequence(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence ||
      err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}
