import { TetherError } from '../errors.ts';
import type { SecretStore } from '../store/index.ts';

/** A cluster without TETHER_SECRETS_KEY cannot hand a conversation's secrets to another node. */
export class SecretsNeedKeyError extends TetherError {
  constructor() {
    super(
      'SECRETS_NEED_KEY',
      'this cluster keeps no secrets: set TETHER_SECRETS_KEY on every node (32 bytes, e.g. openssl rand -base64 32), or create the conversation without secrets',
    );
  }
}

/**
 * Conversations' secrets: in this process's memory (the runtime's
 * environment and the masker read them there), and, given a store, sealed
 * where the node that brings a conversation back reads them. They never
 * reach the log. `'refuse'`: a cluster without a key, where a conversation
 * with secrets could not start its runtime on another node.
 */
export class SecretKeeper {
  readonly #held = new Map<string, Record<string, string>>();
  readonly #sealed: SecretStore | 'refuse' | undefined;

  constructor(sealed: SecretStore | 'refuse' | undefined) {
    this.#sealed = sealed;
  }

  /** Every secret held here, for the masker. */
  values(): Iterable<Record<string, string>> {
    return this.#held.values();
  }

  /** The secrets of a conversation this process runs (empty when it has none). */
  of(conversationId: string): Record<string, string> {
    return this.#held.get(conversationId) ?? {};
  }

  /** Refuses secrets this node could not hand on, before anything is stored. */
  check(secrets: Record<string, string>): void {
    if (this.#sealed === 'refuse' && Object.keys(secrets).length > 0) throw new SecretsNeedKeyError();
  }

  /** A new conversation's secrets (`check`ed already): held, and sealed when there is a store. */
  async keep(conversationId: string, secrets: Record<string, string>): Promise<void> {
    const store = this.#store();
    if (store && Object.keys(secrets).length > 0) await store.put(conversationId, secrets);
    this.#held.set(conversationId, secrets);
  }

  /** Before a conversation comes back here: its sealed secrets, when this process does not hold them. */
  async load(conversationId: string): Promise<void> {
    const store = this.#store();
    if (this.#held.has(conversationId) || !store) return;
    const secrets = await store.get(conversationId);
    if (secrets) this.#held.set(conversationId, secrets);
  }

  /** The conversation is gone (deleted): its secrets too. */
  async forget(conversationId: string): Promise<void> {
    this.#held.delete(conversationId);
    await this.#store()?.delete(conversationId);
  }

  #store(): SecretStore | undefined {
    return this.#sealed === 'refuse' ? undefined : this.#sealed;
  }
}
