import { randomBytes } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { jetstreamManager } from '@nats-io/jetstream';
import { kvSecretStore, SecretsUnsealError, type NatsConnection } from '../../src/store/index.ts';
import { freshBucket, uniqueBucketName, useTestNats } from '../support/nats.ts';
import { newConversationId } from './eventLogContract.ts';
import { secretStoreContract, someSecrets } from './secretStoreContract.ts';

let nc: NatsConnection;
useTestNats((connected) => (nc = connected));

secretStoreContract('KvSecretStore', async () => kvSecretStore(nc, { key: randomBytes(32), bucket: freshBucket(nc) }));

describe('KvSecretStore', () => {
  test('the bucket holds no secret value, in clear, base64, base64url or hex, nor a secret name', async () => {
    const bucket = freshBucket(nc);
    const store = await kvSecretStore(nc, { key: randomBytes(32), bucket });
    const c = newConversationId();
    const secrets = someSecrets();
    await store.put(c, secrets);

    const entry = await (await new Kvm(nc).open(bucket)).get(c);
    expect(entry?.operation).toBe('PUT');
    const raw = Buffer.from(entry!.value).toString('latin1');
    expect(Object.keys(JSON.parse(raw))).toEqual(['v', 'iv', 'tag', 'ct']);
    const plaintext = JSON.stringify(secrets);
    for (const text of [...Object.entries(secrets).flat(), plaintext]) {
      const bytes = Buffer.from(text, 'utf8');
      for (const encoded of [
        bytes.toString('latin1'),
        ...(['base64', 'base64url', 'hex'] as const).map((e) => bytes.toString(e)),
      ]) {
        expect(raw).not.toContain(encoded);
      }
    }
  });

  test('delete leaves no value under the conversation in the bucket', async () => {
    const bucket = freshBucket(nc);
    const store = await kvSecretStore(nc, { key: randomBytes(32), bucket });
    const c = newConversationId();
    await store.put(c, someSecrets());
    await store.delete(c);
    const kv = await new Kvm(nc).open(bucket);
    const history = [];
    for await (const e of await kv.history({ key: c })) history.push(e.operation);
    expect(history).not.toContain('PUT');
    expect(await store.get(c)).toBeUndefined();
  });

  test('a store opened with another key fails to read with SecretsUnsealError; the sealing key still reads', async () => {
    const bucket = freshBucket(nc);
    const store = await kvSecretStore(nc, { key: randomBytes(32), bucket });
    const other = await kvSecretStore(nc, { key: randomBytes(32), bucket });
    const c = newConversationId();
    const secrets = someSecrets();
    await store.put(c, secrets);
    const err = await other.get(c).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SecretsUnsealError);
    expect((err as SecretsUnsealError).message).toContain(c);
    for (const value of Object.values(secrets)) expect((err as Error).message).not.toContain(value);
    expect(await store.get(c)).toEqual(secrets);
  });

  test('a sealed value copied under another conversation does not read', async () => {
    const bucket = freshBucket(nc);
    const store = await kvSecretStore(nc, { key: randomBytes(32), bucket });
    const [a, b] = [newConversationId(), newConversationId()];
    await store.put(a, someSecrets());
    const kv = await new Kvm(nc).open(bucket);
    await kv.put(b, (await kv.get(a))!.value);
    await expect(store.get(b)).rejects.toThrow(SecretsUnsealError);
  });

  test('a value written to the bucket in clear does not read as secrets', async () => {
    const bucket = freshBucket(nc);
    const store = await kvSecretStore(nc, { key: randomBytes(32), bucket });
    const c = newConversationId();
    await (await new Kvm(nc).open(bucket)).put(c, JSON.stringify({ TOKEN: 'written-in-clear' }));
    await expect(store.get(c)).rejects.toThrow(SecretsUnsealError);
  });

  test('a key that is not 32 bytes is refused before the bucket is created', async () => {
    const bucket = uniqueBucketName();
    await expect(kvSecretStore(nc, { key: randomBytes(16), bucket })).rejects.toThrow(TypeError);
    // A KV bucket is the stream KV_<bucket>.
    await expect((await jetstreamManager(nc)).streams.info(`KV_${bucket}`)).rejects.toThrow(/stream not found/);
  });
});
