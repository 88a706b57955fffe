// The one behaviour every SecretStore must have; each implementation's test file runs it.
import { randomBytes } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import type { SecretStore } from '../../src/store/index.ts';
import { newConversationId } from './eventLogContract.ts';

/** Secrets with values no other test uses, so a search for them finds only these. */
export function someSecrets(): Record<string, string> {
  return {
    GITHUB_TOKEN: `ghp_${randomBytes(12).toString('hex')}`,
    OPENAI_API_KEY: `sk-${randomBytes(12).toString('hex')}`,
    PASSPHRASE: `pâté ünïcode ${randomBytes(4).toString('hex')} ✓`,
  };
}

export function secretStoreContract(name: string, makeStore: () => Promise<SecretStore>): void {
  describe(`${name} honours the SecretStore contract`, () => {
    test('secrets put can be got back whole', async () => {
      const store = await makeStore();
      const c = newConversationId();
      const secrets = someSecrets();
      await store.put(c, secrets);
      expect(await store.get(c)).toEqual(secrets);
    });

    test('a later put replaces all the secrets of the conversation, names it leaves out included', async () => {
      const store = await makeStore();
      const c = newConversationId();
      await store.put(c, someSecrets());
      const later = { ONLY_ONE: 'the-only-value' };
      await store.put(c, later);
      expect(await store.get(c)).toEqual(later);
    });

    test('each conversation keeps its own secrets', async () => {
      const store = await makeStore();
      const [a, b] = [newConversationId(), newConversationId()];
      const [sa, sb] = [someSecrets(), someSecrets()];
      await store.put(a, sa);
      await store.put(b, sb);
      expect(await store.get(a)).toEqual(sa);
      expect(await store.get(b)).toEqual(sb);
    });

    test('an unknown or deleted conversation has no secrets, and deleting one that has none is fine', async () => {
      const store = await makeStore();
      const c = newConversationId();
      expect(await store.get(c)).toBeUndefined();
      await store.delete(c);
      await store.put(c, someSecrets());
      await store.delete(c);
      expect(await store.get(c)).toBeUndefined();
    });

    test('changing an object after put, or one that get returned, does not change what is stored', async () => {
      const store = await makeStore();
      const c = newConversationId();
      const secrets = someSecrets();
      const expected = { ...secrets };
      await store.put(c, secrets);
      secrets.GITHUB_TOKEN = 'changed-after-put';
      const got = await store.get(c);
      if (got) got.OPENAI_API_KEY = 'changed-after-get';
      expect(await store.get(c)).toEqual(expected);
    });

    test('an invalid conversation id is refused before anything is stored or read', async () => {
      const store = await makeStore();
      await expect(store.put('a.b', someSecrets())).rejects.toThrow(TypeError);
      await expect(store.get('*')).rejects.toThrow(TypeError);
      await expect(store.delete('>')).rejects.toThrow(TypeError);
    });
  });
}
