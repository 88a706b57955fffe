import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createUser } from '@nats-io/nkeys';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { connectNats, withoutPassword, type NatsAuth } from '../../src/store/natsConnection.ts';
import { natsBinary } from '../support/natsBinary.ts';
import { freePort } from '../support/serverProcess.ts';
import { until } from '../support/until.ts';

/*
 * Credentials beyond the URL (issue 27): each kind against a real nats-server
 * that asks for it, and what a refusal says: the variable and NATS's reason,
 * never a value.
 */

const PASSWORD = 'pw-DO-NOT-LEAK-51f2';
const TOKEN = 'tok-DO-NOT-LEAK-8e3a';

const dir = mkdtempSync(join(tmpdir(), 'tether-nats-auth-'));
const servers: ChildProcess[] = [];

/** A nats-server with this configuration file's text, on a free port; resolves once it answers. */
async function natsWith(config: string): Promise<string> {
  const port = await freePort();
  const file = join(dir, `server-${port}.conf`);
  writeFileSync(file, `port: ${port}\nhost: 127.0.0.1\n${config}\n`);
  const child = spawn(natsBinary(), ['-c', file], { stdio: 'ignore' });
  servers.push(child);
  const url = `nats://127.0.0.1:${port}`;
  await until(async () => {
    const probe = await import('node:net').then(
      ({ connect }) =>
        new Promise<boolean>((resolve) => {
          const socket = connect(port, '127.0.0.1', () => resolve(socket.end() !== undefined));
          socket.on('error', () => resolve(false));
        }),
    );
    return probe;
  }, 'the nats-server');
  return url;
}

async function connects(url: string, auth?: NatsAuth): Promise<true> {
  const nc = await connectNats(url, { name: 'auth-test', ...(auth && { auth }) });
  await nc.flush();
  await nc.close();
  return true;
}

let userUrl: string;
let tokenUrl: string;
let nkeyUrl: string;
let tlsUrl: string;
const nkey = createUser();
const tls = { caFile: join(dir, 'ca.pem'), certFile: join(dir, 'server.pem'), keyFile: join(dir, 'server.key') };

/** A test CA and a server certificate for 127.0.0.1 it signed, made with openssl. */
function makeCertificates(): void {
  const run = (args: string[]) => {
    const result = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`openssl ${args[0]} failed: ${result.stderr}`);
  };
  run(
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=tether test CA'].concat([
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
    ]),
  );
  run([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=127.0.0.1',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
  ]);
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  run(
    ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1'].concat([
      '-extfile',
      'san.ext',
      '-out',
      'server.pem',
    ]),
  );
}

beforeAll(async () => {
  makeCertificates();
  writeFileSync(join(dir, 'user.nk'), `${new TextDecoder().decode(nkey.getSeed())}\n`);
  [userUrl, tokenUrl, nkeyUrl, tlsUrl] = await Promise.all([
    natsWith(`authorization { user: tether, password: "${PASSWORD}" }`),
    natsWith(`authorization { token: "${TOKEN}" }`),
    natsWith(`authorization { users: [ { nkey: ${nkey.getPublicKey()} } ] }`),
    natsWith(`tls { cert_file: "${tls.certFile}", key_file: "${tls.keyFile}" }`),
  ]);
}, 30_000);

afterAll(() => {
  for (const server of servers) server.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('NATS credentials', () => {
  it('connects with NATS_USER and NATS_PASSWORD, and with them in the URL', async () => {
    await expect(connects(userUrl, { user: 'tether', password: PASSWORD })).resolves.toBe(true);
    const inUrl = userUrl.replace('nats://', `nats://tether:${PASSWORD}@`);
    await expect(connects(inUrl)).resolves.toBe(true);
  });

  it('names the variable and NATS reason when the password is refused, never the password', async () => {
    const wrong = connectNats(userUrl, { name: 'auth-test', auth: { user: 'tether', password: `${PASSWORD}-x` } });
    const message = await wrong.then(
      () => 'connected',
      (err: Error) => err.message,
    );
    expect(message).toMatch(/NATS refused NATS_USER\/NATS_PASSWORD/);
    expect(message).toMatch(/authorization/i);
    expect(message).not.toContain(PASSWORD);
    const inUrl = userUrl.replace('nats://', `nats://tether:${PASSWORD}-x@`);
    const fromUrl = await connectNats(inUrl, { name: 'auth-test' }).then(
      () => 'connected',
      (err: Error) => err.message,
    );
    expect(fromUrl).toMatch(/NATS refused the user and password in NATS_URL/);
    expect(fromUrl).not.toContain(PASSWORD);
    expect(fromUrl).toContain('tether:***@');
  });

  it('says no credential was given when the server asks for one', async () => {
    const message = await connectNats(userUrl, { name: 'auth-test' }).then(
      () => 'connected',
      (err: Error) => err.message,
    );
    expect(message).toMatch(/NATS refused no credential/);
  });

  it('connects with NATS_TOKEN, and a wrong token is refused without being shown', async () => {
    await expect(connects(tokenUrl, { token: TOKEN })).resolves.toBe(true);
    const message = await connectNats(tokenUrl, { name: 'auth-test', auth: { token: `${TOKEN}-x` } }).then(
      () => 'connected',
      (err: Error) => err.message,
    );
    expect(message).toMatch(/NATS refused NATS_TOKEN/);
    expect(message).not.toContain(TOKEN);
  });

  it('connects with an nkey seed file (NATS_NKEY); a file that cannot be read names its variable', async () => {
    await expect(connects(nkeyUrl, { nkeyFile: join(dir, 'user.nk') })).resolves.toBe(true);
    await expect(
      connectNats(nkeyUrl, { name: 'auth-test', auth: { nkeyFile: join(dir, 'missing.nk') } }),
    ).rejects.toThrow(/NATS_NKEY names a file that cannot be read \(ENOENT\)/);
  });

  it('connects over TLS with the test CA (NATS_CA), and not without it', async () => {
    await expect(connects(tlsUrl, { tls: { caFile: tls.caFile } })).resolves.toBe(true);
    await expect(connectNats(tlsUrl, { name: 'auth-test' })).rejects.toThrow(/cannot connect to NATS/);
  });
});

describe('the NATS settings', () => {
  it('are read from the NATS command line variables', () => {
    const auth = loadConfig({ NATS_USER: 'u', NATS_PASSWORD: 'p', NATS_CA: '/ca.pem' }).natsAuth;
    expect(auth).toEqual({
      user: 'u',
      password: 'p',
      tls: { caFile: '/ca.pem', certFile: undefined, keyFile: undefined },
    });
    expect(loadConfig({ NATS_CREDS: '/x.creds' }).natsAuth).toEqual({ credsFile: '/x.creds' });
  });

  it('refuse two kinds of credential, a password without a user and a certificate without its key, showing no value', () => {
    expect(() => loadConfig({ NATS_TOKEN: 'secret-token', NATS_USER: 'u' })).toThrow(
      /NATS_USER, NATS_TOKEN: set one kind/,
    );
    expect(() => loadConfig({ NATS_PASSWORD: 'secret-pw' })).toThrow(/NATS_PASSWORD: set NATS_USER with it/);
    expect(() => loadConfig({ NATS_CERT: '/c.pem' })).toThrow(/NATS_CERT, NATS_KEY: set both or neither/);
    expect(() => loadConfig({ NATS_TOKEN: 'secret-token', NATS_USER: 'u' })).not.toThrow(/secret-token/);
  });

  it('never shows a password of a NATS URL', () => {
    expect(withoutPassword('nats://a:pw@h1:4222,nats://b:other@h2:4222,nats://h3:4222')).toBe(
      'nats://a:***@h1:4222,nats://b:***@h2:4222,nats://h3:4222',
    );
  });
});
