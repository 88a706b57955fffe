/**
 * The secrets of each conversation (environment variable name → value), as a
 * whole: a put replaces them all. Implementations: `kvSecretStore` (JetStream
 * KV, bucket `tether_secrets`, values sealed with AES-256-GCM so any node that
 * holds the key reads them) and `memorySecretStore`.
 */
export interface SecretStore {
  put(conversationId: string, secrets: Record<string, string>): Promise<void>;
  /** Throws `SecretsUnsealError` when the stored value cannot be opened with this store's key. */
  get(conversationId: string): Promise<Record<string, string> | undefined>;
  delete(conversationId: string): Promise<void>;
}
