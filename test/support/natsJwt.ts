import {
  createAccount,
  createOperator,
  createUser,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
  type KeyPair,
} from '@nats-io/jwt';

/*
 * A nats-server in operator (JWT) mode, for the tests of NATS_CREDS: an
 * operator, a system account and an application account with JetStream, all
 * preloaded into a memory resolver, and credentials files for users of it.
 */

/** Every account limit open, JetStream included (a zero storage limit would leave JetStream off). */
const OPEN_LIMITS = {
  subs: -1,
  data: -1,
  payload: -1,
  imports: -1,
  exports: -1,
  wildcards: true,
  conn: -1,
  leaf: -1,
  mem_storage: -1,
  disk_storage: -1,
  streams: -1,
  consumer: -1,
};

export interface OperatorMode {
  /** The nats-server configuration: listen on `127.0.0.1:port`, JetStream in `storeDir`. */
  config(port: number, storeDir: string): string;
  /** A credentials file's content for a new user of the application account. */
  userCreds(name: string): Promise<Uint8Array>;
  /** A credentials file's content for a user signed by an account this server does not know. */
  strangerCreds(name: string): Promise<Uint8Array>;
  /** The nkey seed in a credentials file (what must never be shown). */
  seedOf(creds: Uint8Array): string;
}

async function credsFor(name: string, account: KeyPair): Promise<Uint8Array> {
  const user = createUser();
  return fmtCreds(await encodeUser(name, user, account), user);
}

/** A fresh operator with its accounts (new keys on every call). */
export async function operatorMode(): Promise<OperatorMode> {
  const operator = createOperator();
  const system = createAccount();
  const app = createAccount();
  const systemPub = system.getPublicKey();
  const operatorJwt = await encodeOperator('tether-test', operator, { system_account: systemPub });
  const accounts = {
    [systemPub]: await encodeAccount(
      'SYS',
      system,
      { limits: { ...OPEN_LIMITS, mem_storage: 0, disk_storage: 0 } },
      {
        signer: operator,
      },
    ),
    [app.getPublicKey()]: await encodeAccount('TETHER', app, { limits: OPEN_LIMITS }, { signer: operator }),
  };
  const preload = Object.entries(accounts)
    .map(([pub, jwt]) => `    ${pub}: ${jwt}`)
    .join('\n');
  return {
    config: (port, storeDir) =>
      [
        `host: 127.0.0.1`,
        `port: ${port}`,
        `operator: ${operatorJwt}`,
        `system_account: ${systemPub}`,
        `resolver: MEMORY`,
        `resolver_preload: {\n${preload}\n}`,
        `jetstream { store_dir: ${JSON.stringify(storeDir)} }`,
        '',
      ].join('\n'),
    userCreds: (name) => credsFor(name, app),
    strangerCreds: (name) => credsFor(name, createAccount()),
    seedOf: (creds) => /^SU[A-Z2-7]+$/m.exec(new TextDecoder().decode(creds))![0],
  };
}
