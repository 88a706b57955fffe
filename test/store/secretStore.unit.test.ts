import { randomBytes } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { memorySecretStore, parseSecretsKey, seal, SecretsUnsealError, unseal } from '../../src/store/index.ts';
import { newConversationId } from './eventLogContract.ts';
import { secretStoreContract, someSecrets } from './secretStoreContract.ts';

secretStoreContract('MemorySecretStore', async () => memorySecretStore());

// 0xfb bytes encode to '+/v7' in base64 and '-_v7' in base64url: both alphabets' own characters appear.
const KEY = Buffer.alloc(32, 0xfb);

function expectRefused(text: string): void {
  let message = '';
  expect(() => {
    try {
      parseSecretsKey(text);
    } catch (err) {
      message = (err as Error).message;
      throw err;
    }
  }).toThrow(/32 bytes, as 64 hex characters or base64/);
  expect(message).not.toContain(text.trim());
}

describe('parseSecretsKey', () => {
  test('reads 32 bytes given as 64 hex characters, either case', () => {
    expect(parseSecretsKey(KEY.toString('hex'))).toEqual(KEY);
    expect(parseSecretsKey(KEY.toString('hex').toUpperCase())).toEqual(KEY);
  });

  test('reads 32 bytes given as padded base64 or unpadded base64url', () => {
    const b64 = KEY.toString('base64');
    const b64url = KEY.toString('base64url');
    expect([b64.length, b64url.length]).toEqual([44, 43]);
    expect(parseSecretsKey(b64)).toEqual(KEY);
    expect(parseSecretsKey(b64url)).toEqual(KEY);
    const random = randomBytes(32);
    expect(parseSecretsKey(random.toString('base64'))).toEqual(random);
  });

  test('ignores the whitespace around a key read from a file or an env file', () => {
    expect(parseSecretsKey(`  ${KEY.toString('base64')}\n`)).toEqual(KEY);
  });

  test('refuses 31 or 33 bytes in every encoding, without repeating what it was given', () => {
    for (const bytes of [randomBytes(31), randomBytes(33)]) {
      expectRefused(bytes.toString('hex'));
      expectRefused(bytes.toString('base64'));
      expectRefused(bytes.toString('base64url'));
    }
  });

  test('refuses text that is not a key, without repeating it', () => {
    expectRefused('correct horse battery staple');
    expectRefused('g'.repeat(64));
    expectRefused(`${KEY.toString('base64url')}=`.replace('-', '+'));
    expectRefused(`${KEY.toString('hex')}00`);
  });

  test('refuses base64 whose last character carries stray bits, which decodes to the same bytes as a real key', () => {
    const text = KEY.toString('base64url');
    // A canonical last character has its two low bits zero; the next one in the alphabet sets one.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const stray = text.slice(0, -1) + alphabet[alphabet.indexOf(text.slice(-1)) + 1]!;
    expect(Buffer.from(stray, 'base64url')).toEqual(KEY);
    expectRefused(stray);
  });
});

function expectUnsealError(open: () => unknown, conversationId: string, secrets: Record<string, string>): void {
  let caught: unknown;
  try {
    open();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(SecretsUnsealError);
  const err = caught as SecretsUnsealError;
  expect(err.conversationId).toBe(conversationId);
  expect(err.message).toContain(conversationId);
  const told = `${err.message} ${String(err.cause)}`;
  for (const value of Object.values(secrets)) expect(told).not.toContain(value);
}

function flipByte(sealed: string, field: 'iv' | 'tag' | 'ct'): string {
  const value = JSON.parse(sealed);
  const bytes = Buffer.from(value[field], 'base64');
  bytes[bytes.length - 1]! ^= 0x01;
  return JSON.stringify({ ...value, [field]: bytes.toString('base64') });
}

describe('seal and unseal', () => {
  test('what is sealed for a conversation unseals with the same key and conversation', () => {
    const c = newConversationId();
    const secrets = someSecrets();
    expect(unseal(KEY, c, seal(KEY, c, secrets))).toEqual(secrets);
    expect(unseal(KEY, c, seal(KEY, c, {}))).toEqual({});
  });

  test('a sealed value is compact JSON holding a version, a 12-byte IV, a 16-byte tag and the ciphertext', () => {
    const sealed = seal(KEY, newConversationId(), someSecrets());
    const value = JSON.parse(sealed);
    expect(sealed).toBe(JSON.stringify(value));
    expect(Object.keys(value)).toEqual(['v', 'iv', 'tag', 'ct']);
    expect(value.v).toBe(1);
    expect(Buffer.from(value.iv, 'base64')).toHaveLength(12);
    expect(Buffer.from(value.tag, 'base64')).toHaveLength(16);
    expect(Buffer.from(value.ct, 'base64').length).toBeGreaterThan(0);
  });

  test('two seals of the same secrets differ, IV and ciphertext both', () => {
    const c = newConversationId();
    const secrets = someSecrets();
    const [a, b] = [JSON.parse(seal(KEY, c, secrets)), JSON.parse(seal(KEY, c, secrets))];
    expect(a.iv).not.toBe(b.iv);
    expect(a.ct).not.toBe(b.ct);
  });

  test('another key cannot unseal, and the error names the conversation and the key', () => {
    const c = newConversationId();
    const secrets = someSecrets();
    const sealed = seal(KEY, c, secrets);
    expectUnsealError(() => unseal(randomBytes(32), c, sealed), c, secrets);
    expect(() => unseal(randomBytes(32), c, sealed)).toThrow(/key may differ/);
  });

  test('a flipped bit in the IV, the tag or the ciphertext makes unseal throw', () => {
    const c = newConversationId();
    const secrets = someSecrets();
    const sealed = seal(KEY, c, secrets);
    for (const field of ['iv', 'tag', 'ct'] as const)
      expectUnsealError(() => unseal(KEY, c, flipByte(sealed, field)), c, secrets);
  });

  test('a value sealed for one conversation does not unseal for another', () => {
    const [a, b] = [newConversationId(), newConversationId()];
    const secrets = someSecrets();
    expectUnsealError(() => unseal(KEY, b, seal(KEY, a, secrets)), b, secrets);
  });

  test('a truncated tag is refused, though GCM would check a shorter tag', () => {
    const c = newConversationId();
    const secrets = someSecrets();
    const value = JSON.parse(seal(KEY, c, secrets));
    const short = Buffer.from(value.tag, 'base64').subarray(0, 12).toString('base64');
    expectUnsealError(() => unseal(KEY, c, JSON.stringify({ ...value, tag: short })), c, secrets);
  });

  test('text that is not a sealed value throws SecretsUnsealError', () => {
    const c = newConversationId();
    const secrets = { PLAIN: 'stored-in-clear' };
    const ok = JSON.parse(seal(KEY, c, secrets));
    for (const text of ['stored-in-clear', JSON.stringify(secrets), JSON.stringify({ ...ok, v: 2 }), 'null']) {
      expectUnsealError(() => unseal(KEY, c, text), c, secrets);
    }
  });

  test('a key that is not 32 bytes is refused', () => {
    const c = newConversationId();
    expect(() => seal(randomBytes(16), c, {})).toThrow(TypeError);
    expect(() => unseal(randomBytes(16), c, seal(KEY, c, {}))).toThrow(TypeError);
  });
});
