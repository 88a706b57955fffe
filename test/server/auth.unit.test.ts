import type { IncomingMessage } from 'node:http';
import { SignJWT, UnsecuredJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { authenticator, parseTokens } from '../../src/server/auth.ts';

const SECRET = 'a-jwt-secret-of-at-least-32-characters!!';
const key = new TextEncoder().encode(SECRET);
const req = (authorization?: string) => ({ headers: authorization ? { authorization } : {} }) as IncomingMessage;
const url = (query = '') => new URL(`http://localhost/ws${query}`);

describe('authenticator', () => {
  it('makes everyone user local when nothing is configured', async () => {
    expect(await authenticator({})(req(), url())).toBe('local');
  });

  it('maps a configured token to its user, from the header or the query, and refuses others', async () => {
    const auth = authenticator({ tokens: parseTokens('t1:alice, t2:bob') });
    expect(await auth(req('Bearer t1'), url())).toBe('alice');
    expect(await auth(req(), url('?token=t2'))).toBe('bob');
    expect(await auth(req('Bearer nope'), url())).toBeNull();
    expect(await auth(req(), url())).toBeNull();
  });

  it('takes the user from a valid HS256 JWT and refuses expired, unsigned, subject-less or foreign ones', async () => {
    const auth = authenticator({ jwtSecret: SECRET });
    const good = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('carol')
      .setExpirationTime('1h')
      .sign(key);
    expect(await auth(req(`Bearer ${good}`), url())).toBe('carol');
    const expired = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('carol')
      .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
      .sign(key);
    expect(await auth(req(`Bearer ${expired}`), url())).toBeNull();
    const unsigned = new UnsecuredJWT({}).setSubject('carol').encode();
    expect(await auth(req(`Bearer ${unsigned}`), url())).toBeNull();
    const noSubject = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).sign(key);
    expect(await auth(req(`Bearer ${noSubject}`), url())).toBeNull();
    const foreign = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('carol')
      .sign(new TextEncoder().encode(`${SECRET}-other`));
    expect(await auth(req(`Bearer ${foreign}`), url())).toBeNull();
  });

  it('refuses a malformed TETHER_TOKENS entry without echoing the token', () => {
    expect(() => parseTokens('secret-token-without-user')).toThrow(/not token:user/);
    expect(() => parseTokens('secret-token-without-user')).not.toThrow(/secret-token-without/);
  });
});
