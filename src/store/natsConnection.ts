import { readFileSync } from 'node:fs';
import {
  connect,
  credsAuthenticator,
  errors,
  nanos,
  nkeyAuthenticator,
  type ConnectionOptions,
  type NatsConnection,
} from '@nats-io/transport-node';
import {
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import { assertConversationId } from './assertConversationId.ts';
import { StoreUnavailableError } from './errors.ts';
import { DUPLICATE_WINDOW_MS } from './eventLogRules.ts';
import { reconcileStream, refusedCreation, untilLed, type Replication } from './streamSettings.ts';

export const DEFAULT_STREAM = 'TETHER_EVENTS';
export const DEFAULT_SUBJECT_PREFIX = 'tether.conv';

export interface ConnectNatsOptions {
  /** Connection name, shown by `nats server report connections`. */
  name: string;
  /**
   * Keep retrying when the first connection fails (default false: fail fast, so
   * a wrong NATS_URL is reported at start instead of hanging).
   */
  waitOnFirstConnect?: boolean;
  /** How to prove who we are, beyond what the URL holds (NATS_CREDS, NATS_NKEY, ...). */
  auth?: NatsAuth;
}

/**
 * NATS credentials, by the NATS command line's names. At most one of `credsFile`,
 * `nkeyFile`, `user` (with `password`) and `token`; a user and password in the URL
 * work too. TLS is used when any of `ca`, `cert`, `key` is set, or the URL is `tls://`.
 */
export interface NatsAuth {
  /** NATS_CREDS: a credentials file (a user JWT and its nkey seed). */
  credsFile?: string;
  /** NATS_NKEY: a file holding an nkey seed. */
  nkeyFile?: string;
  /** NATS_USER and NATS_PASSWORD. */
  user?: string;
  password?: string;
  /** NATS_TOKEN. */
  token?: string;
  /** NATS_CA, NATS_CERT, NATS_KEY: files. */
  tls?: { caFile?: string; certFile?: string; keyFile?: string };
}

/** The variable that holds the credential in use, for messages (never its value). */
function credentialName(url: string, auth: NatsAuth | undefined): string {
  if (auth?.credsFile !== undefined) return 'NATS_CREDS';
  if (auth?.nkeyFile !== undefined) return 'NATS_NKEY';
  if (auth?.user !== undefined) return 'NATS_USER/NATS_PASSWORD';
  if (auth?.token !== undefined) return 'NATS_TOKEN';
  return /\/\/[^/@]*@/.test(url)
    ? 'the user and password in NATS_URL'
    : 'no credential (NATS_CREDS, NATS_NKEY, NATS_USER, NATS_TOKEN)';
}

/** The connection options `auth` asks for; a file that cannot be read names its variable (not its content). */
function authOptions(auth: NatsAuth | undefined): Partial<ConnectionOptions> {
  if (!auth) return {};
  const read = (variable: string, file: string): Uint8Array => {
    try {
      return readFileSync(file);
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      throw new StoreUnavailableError(`${variable} names a file that cannot be read (${String(code ?? err)})`);
    }
  };
  const tls = auth.tls && Object.values(auth.tls).some((v) => v !== undefined) ? { tls: auth.tls } : {};
  if (auth.credsFile !== undefined)
    return { ...tls, authenticator: credsAuthenticator(read('NATS_CREDS', auth.credsFile)) };
  if (auth.nkeyFile !== undefined) {
    const seed = new TextEncoder().encode(new TextDecoder().decode(read('NATS_NKEY', auth.nkeyFile)).trim());
    return { ...tls, authenticator: nkeyAuthenticator(seed) };
  }
  if (auth.user !== undefined) return { ...tls, user: auth.user, pass: auth.password ?? '' };
  if (auth.token !== undefined) return { ...tls, token: auth.token };
  return tls;
}

/** A NATS URL (or a list of them) without its passwords: what may be shown. */
export function withoutPassword(url: string): string {
  return url.replace(/(\/\/[^/:@]*):[^/@]*@/g, '$1:***@');
}

/**
 * Connects to NATS. `url` may list the servers of a cluster, comma-separated;
 * the client picks among them and moves to another when its server goes away.
 * Once connected the client reconnects forever: a restarted nats-server must not
 * end a long-lived session server. Requests made while disconnected time out
 * and surface as StoreUnavailableError.
 */
export async function connectNats(url: string, options: ConnectNatsOptions): Promise<NatsConnection> {
  const shown = withoutPassword(url);
  const { servers, user } = withoutUserInfo(serverUrls(url));
  if (servers.length === 0)
    throw new StoreUnavailableError(`cannot connect to NATS at "${shown}": no server URL in it`);
  // nats.js does not read a user and password from its server URLs: they are given as options.
  const fromUrl = user && options.auth?.user === undefined ? { user: user.name, pass: user.password } : {};
  const auth = { ...fromUrl, ...authOptions(options.auth) };
  try {
    const nc = await connect({
      ...auth,
      // nats.js takes one string as one URL: a list must come as an array.
      servers,
      name: options.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 1000,
      waitOnFirstConnect: options.waitOnFirstConnect ?? false,
      // Every request would otherwise build an Error with a stack trace up front, a
      // fifth of the append path's CPU; errors are translated where they enter anyway.
      noAsyncTraces: true,
    });
    onConnectionChanges(nc);
    return nc;
  } catch (err) {
    // nats.js may quote the URL it tried: its password never goes further.
    const reason = hide(err instanceof Error ? err.message : String(err), options.auth, url);
    const refused = /authoriz|authenticat|permission|credential|nkey|jwt/i.test(reason);
    const which = refused ? ` (NATS refused ${credentialName(url, options.auth)})` : '';
    throw new StoreUnavailableError(`cannot connect to NATS at ${shown}${which}: ${reason}`);
  }
}

/** `text` with every credential value of `auth` and `url` replaced. */
function hide(text: string, auth: NatsAuth | undefined, url: string): string {
  const fromUrl = [...url.matchAll(/\/\/[^/:@]*:([^/@]*)@/g)].map((m) => m[1]!);
  const values = [auth?.password, auth?.token, ...fromUrl].filter((v): v is string => v !== undefined && v.length > 0);
  return values.reduce((out, value) => out.split(value).join('***'), withoutPassword(text));
}

/** The URLs without their user info, and the first user and password found in them. */
function withoutUserInfo(urls: string[]): { servers: string[]; user?: { name: string; password: string } } {
  let user: { name: string; password: string } | undefined;
  const servers = urls.map((text) => {
    const found = /^([a-z]+:\/\/)([^/@]*)@(.*)$/i.exec(text);
    if (!found) return text;
    const [, scheme, info, rest] = found as unknown as [string, string, string, string];
    const at = info.indexOf(':');
    const name = decodeURIComponent(at < 0 ? info : info.slice(0, at));
    user ??= { name, password: at < 0 ? '' : decodeURIComponent(info.slice(at + 1)) };
    return `${scheme}${rest}`;
  });
  return { servers, ...(user && { user }) };
}

/** The URLs of a comma-separated list, trimmed, without empty entries. */
function serverUrls(url: string): string[] {
  return url
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '');
}

const MIB = 1024 * 1024;

/**
 * The bytes one pull of the event stream may ask for: far below the 64 MiB
 * nats-server queues for a client by default (past that it drops the whole
 * connection as a slow consumer), and at least two of the largest message the
 * server accepts, so that one event always fits in a pull.
 */
export function pullBytes(nc: NatsConnection): number {
  return Math.max(8 * MIB, 2 * (nc.info?.max_payload ?? MIB));
}

/** The subject that holds one conversation's events: `<prefix>.<conversationId>.events`. */
export function subjectFor(prefix: string, conversationId: string): string {
  assertConversationId(conversationId);
  return `${prefix}.${conversationId}.events`;
}

export interface EventStreamOptions extends Replication {
  stream?: string;
  subjectPrefix?: string;
}

/**
 * Creates the event stream, or updates it when its subjects, dedupe settings or
 * replicas drifted. File storage, no limits (the log is the source of truth), direct get
 * for cheap `lastSeq`. Storage type is not changed on an existing stream.
 * Only 2.9-compatible settings: no `filter_subjects`, per-message TTL or batches.
 */
export async function ensureEventStream(jsm: JetStreamManager, options: EventStreamOptions = {}): Promise<StreamInfo> {
  const name = options.stream ?? DEFAULT_STREAM;
  const wanted = {
    subjects: [`${options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX}.*.events`],
    allow_direct: true,
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
    discard: DiscardPolicy.Old,
    max_msgs: -1,
    max_bytes: -1,
    max_age: 0,
    max_msgs_per_subject: -1,
  } satisfies Partial<StreamConfig>;
  let existing: StreamInfo | undefined;
  try {
    existing = await jsm.streams.info(name);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) throw err;
  }
  const { replicas } = options;
  if (!existing) {
    const created = await jsm.streams
      .add({
        name,
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        num_replicas: replicas ?? 1,
        ...wanted,
      })
      .catch((err: unknown) => {
        throw refusedCreation(err, `the stream ${name}`, { replicas });
      });
    return untilLed(jsm, created);
  }
  const current = existing.config;
  const drifted =
    current.subjects?.join(' ') !== wanted.subjects.join(' ') ||
    current.allow_direct !== wanted.allow_direct ||
    current.duplicate_window !== wanted.duplicate_window ||
    current.discard !== wanted.discard ||
    current.max_msgs !== wanted.max_msgs ||
    current.max_bytes !== wanted.max_bytes ||
    current.max_age !== wanted.max_age ||
    current.max_msgs_per_subject !== wanted.max_msgs_per_subject;
  const updated = drifted ? await jsm.streams.update(name, { ...current, ...wanted }) : existing;
  return untilLed(jsm, await reconcileStream(jsm, updated, { replicas }));
}

/** nats.js's requests under way (its internals: no public API lists them). */
interface RequestMux {
  protocol?: { muxSubscriptions?: { all(): Array<{ cancel(err?: Error): void }> } };
}

/**
 * What a connection does as it changes, for as long as it lives:
 * - a server in lame-duck mode is about to go: move to another one now, while
 *   nothing is lost, rather than when it closes the connection with whatever
 *   is in flight (with one server known there is nowhere to go: stay);
 * - a request out when the connection drops (a KV write, a JetStream API call,
 *   a node's forwarded action) may have lost its answer with the old
 *   connection, and nats.js would wait out its whole timeout (5 s) before
 *   saying so: each fails at once instead, as unavailable, so that its caller
 *   goes on or asks again. The event log's appends are sent again instead
 *   (JetStreamPublisher).
 */
function onConnectionChanges(nc: NatsConnection): void {
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'ldm' && nc.getServers().length > 1) await nc.reconnect().catch(() => undefined);
      if (status.type !== 'disconnect') continue;
      for (const request of (nc as unknown as RequestMux).protocol?.muxSubscriptions?.all() ?? [])
        request.cancel(new errors.RequestError('the connection to NATS dropped before the answer came'));
    }
  })().catch(() => undefined);
}

/**
 * Calls `onChange(false)` when the connection to NATS drops and `onChange(true)`
 * when it is back (nats.js reconnects by itself). Ends when the connection closes.
 */
export function watchConnection(nc: NatsConnection, onChange: (connected: boolean) => void): void {
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect' || status.type === 'reconnecting') onChange(false);
      else if (status.type === 'reconnect') onChange(true);
      else if (status.type === 'close') onChange(false);
    }
  })().catch(() => onChange(false));
}

/**
 * Whether NATS answers a ping within `timeoutMs`: false while it is away, and
 * also while it is frozen or overloaded with its socket still open, which the
 * connection status alone does not show.
 */
export async function natsAnswers(nc: NatsConnection, timeoutMs = 1_000): Promise<boolean> {
  if (nc.isClosed()) return false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([
      nc.flush().then(
        () => true,
        () => false,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
