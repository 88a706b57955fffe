// Helpers for *.int.test.ts files: the run's nats-server and names no other test uses.
import { randomBytes } from 'node:crypto';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, inject, onTestFinished } from 'vitest';
import type { NatsConnection } from '../../src/store/index.ts';
import { connectNats } from '../../src/store/natsConnection.ts';

/** Connects to the nats-server that test/support/globalSetup.ts started. */
export function connectTestNats(): Promise<NatsConnection> {
  return connectNats(inject('natsUrl'), { name: 'tether-tests' });
}

function token(): string {
  return randomBytes(6).toString('hex');
}

/** A stream name no other test uses. */
export function uniqueStreamName(): string {
  return `TEST_${token().toUpperCase()}`;
}

/** A subject prefix no other test uses (streams may not share subjects). */
export function uniqueSubjectPrefix(): string {
  return `test.${token()}.conv`;
}

/** A KV bucket name no other test uses. */
export function uniqueBucketName(): string {
  return `test_${token()}`;
}

/** A KV bucket name no other test uses, destroyed on `nc` when the calling test finishes. */
export function freshBucket(nc: NatsConnection): string {
  const bucket = uniqueBucketName();
  onTestFinished(async () => {
    await (await new Kvm(nc).open(bucket)).destroy();
  });
  return bucket;
}

/**
 * Connects to the run's nats-server once for the calling file (before its
 * tests, closed after them) and hands the connection to `use`.
 */
export function useTestNats(use: (nc: NatsConnection) => void): void {
  let nc: NatsConnection | undefined;
  beforeAll(async () => {
    nc = await connectTestNats();
    use(nc);
  });
  afterAll(() => nc?.close());
}

/** As useTestNats, with a JetStream manager on the connection handed over too. */
export function useTestJetStream(use: (nc: NatsConnection, jsm: JetStreamManager) => void): void {
  let nc: NatsConnection | undefined;
  beforeAll(async () => {
    nc = await connectTestNats();
    use(nc, await jetstreamManager(nc));
  });
  afterAll(() => nc?.close());
}
