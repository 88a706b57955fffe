// The set-up of the end-to-end tests: `const e2e = useE2e()` at the top of a file (or a
// describe). What a test opens through it, in its body or its beforeEach and afterEach
// hooks, is closed once that test has passed (after those hooks); what a beforeAll or a
// failed test opened, after the last test.
import { rm } from 'node:fs/promises';
import { afterAll, onTestFinished, TestRunner } from 'vitest';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/store/index.ts';
import { natsBinary } from './natsBinary.ts';
import { startNatsCluster, type NatsCluster, type NatsClusterOptions } from './natsCluster.ts';
import { makeDataDir, startServer, type ServerProcess, type StartServerOptions } from './serverProcess.ts';
import { WsClient, wsUrlFor, type WsClientOptions } from './wsClient.ts';

/** Bounds a whole clean-up: a server gets SIGTERM, then SIGKILL after 20 s. */
const CLEANUP_TIMEOUT_MS = 60_000;

export interface ConnectOptions extends WsClientOptions {
  /** Resume after this seq (`after_seq`). */
  afterSeq?: number;
  /** Sign in with this token (`token` in the address, as the page does). */
  token?: string;
}

export interface E2e {
  /** Starts `tether serve` (see startServer); stopped at clean-up unless it has ended. */
  start(options?: StartServerOptions): Promise<ServerProcess>;
  /** A nats-server with JetStream for servers to share (NATS_URL), stopped once they have. */
  nats(): Promise<EmbeddedNats>;
  /** A cluster of three nats-servers (see startNatsCluster), stopped once the servers have. */
  natsCluster(options?: NatsClusterOptions): Promise<NatsCluster>;
  /** A fresh temporary directory (a data dir to start servers on, a shared workspaces dir); removed at clean-up. */
  tempDir(): Promise<string>;
  /** A client on a conversation, once its sync frame arrived; terminated at clean-up. */
  connect(server: { wsUrl: string }, conversationId: string, options?: ConnectOptions): Promise<WsClient>;
  /** A client that is only starting to open, on any address (refused ones too); terminated at clean-up. */
  open(url: string, options?: WsClientOptions): WsClient;
  /** Runs `cleanup` at clean-up, once the servers have stopped (the last one given runs first). */
  onCleanup(cleanup: () => unknown): void;
}

/** What one test (or the file) opened; closed sockets first, then servers, then the rest, then directories. */
class Opened {
  readonly sockets: WsClient[] = [];
  readonly servers: ServerProcess[] = [];
  readonly cleanups: Array<() => unknown> = [];
  readonly dirs: string[] = [];

  /** Takes over what `other` opened, to close it with the rest. */
  adopt(other: Opened): void {
    this.sockets.push(...other.sockets.splice(0));
    this.servers.push(...other.servers.splice(0));
    this.cleanups.push(...other.cleanups.splice(0));
    this.dirs.push(...other.dirs.splice(0));
  }

  async close(): Promise<void> {
    const failures: unknown[] = [];
    const settle = async (work: Array<Promise<unknown>>) => {
      for (const result of await Promise.allSettled(work))
        if (result.status === 'rejected') failures.push(result.reason);
    };
    await settle(this.sockets.splice(0).map((socket) => socket.terminate()));
    await settle(this.servers.splice(0).map((server) => server.stop()));
    for (const cleanup of this.cleanups.splice(0).reverse()) await settle([Promise.resolve().then(cleanup)]);
    await settle(this.dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
    if (failures.length > 0) throw new AggregateError(failures, 'clean-up of the end-to-end set-up failed');
  }
}

/** The end-to-end set-up of this file or describe: servers, directories and clients, each closed in time. */
export function useE2e(): E2e {
  const ofFile = new Opened();
  const ofTest = new WeakMap<object, Opened>();
  afterAll(() => ofFile.close(), CLEANUP_TIMEOUT_MS);

  const opened = (): Opened => {
    const test = TestRunner.getCurrentTest();
    if (!test) return ofFile;
    let scope = ofTest.get(test);
    if (!scope) {
      const fresh = new Opened();
      ofTest.set(test, fresh);
      onTestFinished(({ task }) => {
        ofTest.delete(test);
        // A failed test's onTestFailed hooks run after this one and may read its servers (their stderr): what it
        // opened stays until the file is done.
        if (task.result?.state === 'fail') ofFile.adopt(fresh);
        else return fresh.close();
      }, CLEANUP_TIMEOUT_MS);
      scope = fresh;
    }
    return scope;
  };

  const open = (url: string, options: WsClientOptions = {}): WsClient => {
    const client = WsClient.open(url, options);
    opened().sockets.push(client);
    return client;
  };
  const onCleanup = (cleanup: () => unknown): void => {
    opened().cleanups.push(cleanup);
  };
  const tempDir = async (): Promise<string> => {
    const dir = await makeDataDir();
    opened().dirs.push(dir);
    return dir;
  };

  return {
    async start(options = {}) {
      const server = await startServer(options);
      opened().servers.push(server);
      return server;
    },
    async nats() {
      const nats = await startEmbeddedNats({ dataDir: await tempDir(), binary: natsBinary() });
      onCleanup(() => nats.stop());
      return nats;
    },
    async natsCluster(options) {
      const cluster = await startNatsCluster(options);
      onCleanup(() => cluster.stop());
      return cluster;
    },
    tempDir,
    async connect(server, conversationId, { afterSeq, token, ...options } = {}) {
      const url = new URL(wsUrlFor(server.wsUrl, conversationId, afterSeq));
      if (token !== undefined) url.searchParams.set('token', token);
      const client = open(url.toString(), options);
      await client.opened;
      await client.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
      return client;
    },
    open,
    onCleanup,
  };
}
