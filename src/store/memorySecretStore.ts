import { assertConversationId } from './assertConversationId.ts';
import type { SecretStore } from './secretStore.ts';

/**
 * The in-memory twin of KvSecretStore. Nothing leaves the process, so nothing
 * is sealed; copies go in and out, so a caller's later change to its object
 * does not reach the store.
 */
export class MemorySecretStore implements SecretStore {
  readonly #secrets = new Map<string, Record<string, string>>();

  async put(conversationId: string, secrets: Record<string, string>): Promise<void> {
    assertConversationId(conversationId);
    this.#secrets.set(conversationId, { ...secrets });
  }

  async get(conversationId: string): Promise<Record<string, string> | undefined> {
    assertConversationId(conversationId);
    const secrets = this.#secrets.get(conversationId);
    return secrets === undefined ? undefined : { ...secrets };
  }

  async delete(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    this.#secrets.delete(conversationId);
  }
}

export function memorySecretStore(): MemorySecretStore {
  return new MemorySecretStore();
}
