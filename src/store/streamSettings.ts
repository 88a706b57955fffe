import { setTimeout as sleep } from 'node:timers/promises';
import { nanos, type NatsConnection } from '@nats-io/transport-node';
import {
  JetStreamApiError,
  StorageType,
  jetstreamManager,
  type JetStreamManager,
  type StreamInfo,
} from '@nats-io/jetstream';
import { Bucket, Kvm, type KV } from '@nats-io/kv';
import { StoreSettingsError, StoreUnavailableError } from './errors.ts';
import { retryingKv } from './kvRetry.ts';
import { toStoreError } from './natsErrors.ts';

/** What the configuration says about every stream and bucket Tether keeps. */
export interface Replication {
  /**
   * Copies JetStream keeps of each message (1 to 5, at most the servers in the
   * cluster). Undefined: 1 for a new stream, an existing one kept as it is (a
   * command that only reads must not change what the nodes set).
   */
  replicas?: number;
}

/** The settings a start brings an existing stream to: the configuration's, not the ones it was created with. */
export interface StreamSettings {
  /** Undefined: left as it is. */
  replicas?: number;
  /** Message age limit in ms (a bucket's TTL); undefined: none is wanted, whatever the stream has is kept. */
  maxAgeMs?: number;
}

// JetStream refuses a new stream for its replicas: > 1 on a single server (10074, for
// good), more than the servers that have joined (10023: passes once the cluster formed).
const SETTINGS_REFUSED = new Set([10074, 10023]);

/**
 * Updates an existing stream whose replicas or age limit differ from the
 * configuration, and returns its info. Fewer replicas than it has are refused
 * (that drops copies: an operator's decision, not a start's), and NATS may
 * refuse more (more than servers): each a StoreSettingsError naming the
 * stream, the setting, what it has and what was wanted; an unreachable NATS is
 * a StoreUnavailableError.
 */
export async function reconcileStream(
  jsm: JetStreamManager,
  info: StreamInfo,
  wanted: StreamSettings,
): Promise<StreamInfo> {
  const current = info.config;
  const maxAge = wanted.maxAgeMs === undefined ? current.max_age : nanos(wanted.maxAgeMs);
  const replicas = wanted.replicas ?? current.num_replicas;
  if (current.num_replicas === replicas && current.max_age === maxAge) return info;
  const setting = current.num_replicas !== replicas ? 'replicas' : 'ttl';
  const [have, want] =
    setting === 'replicas'
      ? [String(current.num_replicas), String(replicas)]
      : [`${current.max_age / 1e6} ms`, `${wanted.maxAgeMs} ms`];
  const refuse = (reason: string, cause?: unknown) =>
    new StoreSettingsError(current.name, setting, have, want, reason, { cause });
  if (replicas < current.num_replicas) {
    throw refuse(
      `a start does not lower replicas (that drops copies): lower them yourself (nats stream edit ${current.name} --replicas ${replicas}), or configure ${current.num_replicas}`,
    );
  }
  // (A stream's info names its cluster only on a clustered server.) A single nats-server 2.9 accepts such an update and reports the replicas it cannot keep: refuse it here.
  if (replicas > 1 && !info.cluster?.name)
    throw refuse('NATS refused: replicas > 1 not supported in non-clustered mode');
  // JetStream wants the dedupe window within the age limit (10052 otherwise).
  const window = maxAge > 0 ? Math.min(current.duplicate_window, maxAge) : current.duplicate_window;
  try {
    const config = { ...current, num_replicas: replicas, max_age: maxAge, duplicate_window: window };
    return await jsm.streams.update(current.name, config);
  } catch (err) {
    if (!(err instanceof JetStreamApiError)) throw toStoreError(err, `updating the stream ${current.name}`);
    throw refuse(`NATS refused: ${err.message}`, err);
  }
}

/** A creation JetStream refused for its settings, as a StoreSettingsError; anything else as it came. */
export function refusedCreation(err: unknown, stream: string, wanted: StreamSettings): unknown {
  if (!(err instanceof JetStreamApiError && SETTINGS_REFUSED.has(err.code)))
    return toStoreError(err, `creating ${stream}`);
  const reason = `NATS refused: ${err.message}`;
  return new StoreSettingsError(stream, 'replicas', 'none (new)', String(wanted.replicas ?? 1), reason, { cause: err });
}

export interface BucketOptions extends Replication {
  /** A key ages out this long after its last write; undefined: never. */
  ttlMs?: number;
  /** Whether any replica may answer a get (default: the server's default, on). */
  allowDirect?: boolean;
  /**
   * Gets asked of the stream's leader whatever the bucket allows: never a
   * replica's answer that is behind (with 3 servers, 26 of 2,000 gets made
   * through a replica's server right after a put found nothing). The bucket
   * itself is left as it is, so that other handles on it work as they did.
   */
  leaderReads?: boolean;
}

/**
 * Opens a KV bucket with one revision per key on file storage, creating it
 * when missing, then brings its replicas and TTL to `options`
 * (`Kvm.create` on an existing bucket keeps the settings it was created with).
 */
export async function openBucket(nc: NatsConnection, bucket: string, options: BucketOptions = {}): Promise<KV> {
  const wanted: StreamSettings = { replicas: options.replicas, maxAgeMs: options.ttlMs };
  const kvm = new Kvm(nc);
  let kv: KV;
  try {
    kv = await kvm.create(bucket, {
      history: 1,
      storage: StorageType.File,
      replicas: wanted.replicas ?? 1,
      ...(options.ttlMs === undefined ? {} : { ttl: options.ttlMs }),
      ...(options.allowDirect === undefined ? {} : { allow_direct: options.allowDirect }),
    });
  } catch (err) {
    throw refusedCreation(err, `the bucket ${bucket}`, wanted);
  }
  if (options.leaderReads && kv instanceof Bucket) kv.direct = false;
  const status = await kv.status().catch((err: unknown) => {
    throw toStoreError(err, `reading the bucket ${bucket}`);
  });
  // Replicas and TTL are the server's business: the handle works the same after the update.
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  await untilLed(jsm, await reconcileStream(jsm, status.streamInfo, wanted));
  return retryingKv(kv);
}

const LEADER_WAIT_MS = 10_000;
const LEADER_POLL_MS = 100;

/**
 * Waits until a replicated stream has a leader. Just created or scaled, it
 * has none for a moment, and a write meanwhile finds no responder (nats.js
 * says "jetstream is not enabled"): a node's first heartbeat would fail.
 */
export async function untilLed(jsm: JetStreamManager, info: StreamInfo): Promise<StreamInfo> {
  const name = info.config.name;
  const deadline = performance.now() + LEADER_WAIT_MS;
  let current = info;
  // A single server's streams name no cluster, and need no leader.
  while (current.cluster?.name && !current.cluster.leader) {
    if (performance.now() > deadline) {
      throw new StoreUnavailableError(`the stream ${name} has no leader after ${LEADER_WAIT_MS} ms`);
    }
    await sleep(LEADER_POLL_MS);
    try {
      current = await jsm.streams.info(name);
    } catch (err) {
      throw toStoreError(err, `reading the stream ${name}`);
    }
  }
  return current;
}
