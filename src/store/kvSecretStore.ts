import type { NatsConnection } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';
import { assertConversationId } from './assertConversationId.ts';
import { removeKey } from './kvRemove.ts';
import { toStoreError } from './natsErrors.ts';
import { assertSecretsKey, seal, unseal } from './secretSeal.ts';
import type { SecretStore } from './secretStore.ts';
import { openBucket, type Replication } from './streamSettings.ts';

export const DEFAULT_SECRET_BUCKET = 'tether_secrets';

export interface KvSecretStoreOptions extends Replication {
  /** The 32-byte AES-256-GCM key (`parseSecretsKey`); every node must hold the same one. */
  key: Buffer;
  /** KV bucket name (default `tether_secrets`). */
  bucket?: string;
}

/**
 * Secrets in a JetStream KV bucket, one key per conversation, one revision
 * kept, each value sealed with AES-256-GCM (`secretSeal.ts`): anything on the
 * NATS account can read the bucket, only a holder of the key the values.
 */
export class KvSecretStore implements SecretStore {
  readonly #kv: KV;
  readonly #key: Buffer;

  constructor(kv: KV, key: Buffer) {
    assertSecretsKey(key);
    this.#kv = kv;
    this.#key = Buffer.from(key);
  }

  async put(conversationId: string, secrets: Record<string, string>): Promise<void> {
    assertConversationId(conversationId);
    const sealed = seal(this.#key, conversationId, secrets);
    try {
      await this.#kv.put(conversationId, sealed);
    } catch (err) {
      throw toStoreError(err, `saving the secrets of ${conversationId}`);
    }
  }

  async get(conversationId: string): Promise<Record<string, string> | undefined> {
    assertConversationId(conversationId);
    let entry;
    try {
      entry = await this.#kv.get(conversationId);
    } catch (err) {
      throw toStoreError(err, `loading the secrets of ${conversationId}`);
    }
    if (entry === null || entry.operation !== 'PUT') return undefined;
    return unseal(this.#key, conversationId, entry.string());
  }

  async delete(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    try {
      // A purge of the subject: no earlier revision survives, and no marker is left behind.
      await removeKey(this.#kv, conversationId);
    } catch (err) {
      throw toStoreError(err, `deleting the secrets of ${conversationId}`);
    }
  }
}

/** Opens (creating when missing) the secrets bucket on `nc`. */
export async function kvSecretStore(nc: NatsConnection, options: KvSecretStoreOptions): Promise<KvSecretStore> {
  assertSecretsKey(options.key);
  let kv;
  try {
    kv = await openBucket(nc, options.bucket ?? DEFAULT_SECRET_BUCKET, { replicas: options.replicas });
  } catch (err) {
    throw toStoreError(err, 'opening the secrets bucket');
  }
  return new KvSecretStore(kv, options.key);
}
