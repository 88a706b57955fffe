import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { SecretsUnsealError } from './errors.ts';

const ALGORITHM = 'aes-256-gcm';
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_EXPECTED = 'TETHER_SECRETS_KEY must be 32 bytes, as 64 hex characters or base64 (openssl rand -base64 32)';
const KEY_MAY_DIFFER =
  'the key may differ from the one that sealed them (every node needs the same TETHER_SECRETS_KEY), ' +
  'or the stored value was altered or copied from another conversation';

/**
 * Reads the secrets key: 32 bytes as 64 hex characters, or as base64 (44
 * characters, padded) or base64url (43). Anything else throws an Error that
 * says what is expected and never repeats the text it was given.
 */
export function parseSecretsKey(text: string): Buffer {
  const t = text.trim();
  let key: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(t)) key = Buffer.from(t, 'hex');
  else if (/^[A-Za-z0-9+/]{43}=$/.test(t)) key = canonical(t, 'base64');
  else if (/^[A-Za-z0-9_-]{43}$/.test(t)) key = canonical(t, 'base64url');
  if (key?.length !== KEY_BYTES) throw new Error(`${KEY_EXPECTED}; got ${t.length} characters`);
  return key;
}

// Node decodes base64 leniently; a text that does not encode back to itself
// (stray bits in its last character) is a typo, not a key.
function canonical(text: string, encoding: 'base64' | 'base64url'): Buffer | undefined {
  const bytes = Buffer.from(text, encoding);
  return bytes.toString(encoding) === text ? bytes : undefined;
}

/**
 * Seals a conversation's secrets: AES-256-GCM with a fresh random IV, the
 * conversation id as additional data (a value copied under another
 * conversation does not open), as compact JSON `{"v":1,"iv","tag","ct"}`
 * (base64).
 */
export function seal(key: Buffer, conversationId: string, secrets: Record<string, string>): string {
  assertSecretsKey(key);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(conversationId, 'utf8'));
  const ct = Buffer.concat([cipher.update(JSON.stringify(secrets), 'utf8'), cipher.final()]);
  const tag = cipher.getAuthTag();
  return JSON.stringify({ v: 1, iv: iv.toString('base64'), tag: tag.toString('base64'), ct: ct.toString('base64') });
}

/**
 * Opens what `seal` made for the same conversation with the same key. Throws
 * `SecretsUnsealError` for a wrong key, altered bytes, another conversation's
 * value or anything that is not a sealed value; its message and cause never
 * carry the plaintext.
 */
export function unseal(key: Buffer, conversationId: string, sealed: string): Record<string, string> {
  assertSecretsKey(key);
  const { iv, tag, ct } = envelope(conversationId, sealed);
  let plaintext: string;
  try {
    // authTagLength pins the tag at 16 bytes: GCM would otherwise accept a truncated one.
    const decipher = createDecipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(conversationId, 'utf8'));
    decipher.setAuthTag(tag);
    plaintext = Buffer.concat([decipher.update(ct), decipher.final()]).toString('utf8');
  } catch (err) {
    throw new SecretsUnsealError(conversationId, KEY_MAY_DIFFER, { cause: err });
  }
  return secretsOf(conversationId, plaintext);
}

/** Throws a TypeError unless `key` has the 32 bytes AES-256 needs. */
export function assertSecretsKey(key: Buffer): void {
  if (key.length !== KEY_BYTES) throw new TypeError(`the secrets key must be ${KEY_BYTES} bytes, not ${key.length}`);
}

function envelope(conversationId: string, sealed: string): { iv: Buffer; tag: Buffer; ct: Buffer } {
  const notSealed = () => new SecretsUnsealError(conversationId, 'the stored value is not a v1 sealed value');
  let value: unknown;
  try {
    value = JSON.parse(sealed);
  } catch {
    throw notSealed();
  }
  if (typeof value !== 'object' || value === null) throw notSealed();
  const { v, iv, tag, ct } = value as Record<string, unknown>;
  if (v !== 1 || typeof iv !== 'string' || typeof tag !== 'string' || typeof ct !== 'string') throw notSealed();
  const bytes = { iv: Buffer.from(iv, 'base64'), tag: Buffer.from(tag, 'base64'), ct: Buffer.from(ct, 'base64') };
  if (bytes.iv.length !== IV_BYTES || bytes.tag.length !== TAG_BYTES) throw notSealed();
  return bytes;
}

// Only reached once GCM has authenticated the value, so a failure here means a
// key was used to seal something else. Neither message nor cause may quote the
// plaintext (JSON.parse's messages do), so the cause is dropped.
function secretsOf(conversationId: string, plaintext: string): Record<string, string> {
  const notSecrets = () => new SecretsUnsealError(conversationId, 'the sealed value is not a map of secrets');
  let value: unknown;
  try {
    value = JSON.parse(plaintext);
  } catch {
    throw notSecrets();
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw notSecrets();
  const entries: [string, unknown][] = Object.entries(value);
  if (!entries.every((e): e is [string, string] => typeof e[1] === 'string')) throw notSecrets();
  // fromEntries defines each name as an own property, `__proto__` included.
  return Object.fromEntries(entries);
}
