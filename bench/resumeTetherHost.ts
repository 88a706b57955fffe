// The Tether server of the resume benchmark, as `tether serve` runs it (JetStream
// event log, KV stores, in-memory runtime, scripted agent) but in the bench's
// process, stopped and started again on the same port and store for the
// restart case; and the REST calls the bench makes to it.
import { performance } from 'node:perf_hooks';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { memoryRuntimeProvider } from '../src/runtime/memoryRuntime.ts';
import type { NodeHost } from '../src/host/index.ts';
import { connectNats, jetStreamStores } from '../src/store/index.ts';
import { createTether } from '../src/tether.ts';
import { benchAuthenticate, http } from './benchHttp.ts';
import type { BenchStoreNames as TetherStoreNames } from './benchStores.ts';

/** One Tether server as `tether serve` runs it: its own NATS connection, stores, session manager and listener. */
export interface TetherInstance {
  port: number;
  base: string;
  manager: NodeHost;
  /** Stops it the way SIGTERM does (src/cli/serve.ts): server closed (1001), sessions passivated, NATS drained. */
  stop(): Promise<void>;
}

/** Starts a Tether server on `port` (0: any free one) over the named stream and buckets. */
async function startTether(natsUrl: string, names: TetherStoreNames, port = 0): Promise<TetherInstance> {
  const nc = await connectNats(natsUrl, { name: 'tether-bench-resume' });
  const tether = createTether({
    stores: await jetStreamStores(nc, names),
    runtimes: memoryRuntimeProvider(),
    // The agent thinks for 10 minutes after a message: every further user message is stored as exactly one event.
    agent: scriptedAgent({ delayMs: 10 * 60_000 }),
    logger: silentLogger,
    server: { authenticate: benchAuthenticate },
  });
  const address = await tether.listen(port, '127.0.0.1');
  // As serve does after listening: conversations that were mid-task come back by themselves.
  const recovering = tether.host.recover().catch(() => 0);
  return {
    port: address.port,
    base: `http://127.0.0.1:${address.port}`,
    manager: tether.host,
    stop: async () => {
      await recovering;
      await tether.close();
      await nc.drain();
    },
  };
}

/** The Tether server of the resume bench: one at a time, restarted on the same port and store. */
export class TetherHost {
  readonly #natsUrl: string;
  readonly #names: TetherStoreNames;
  #instance: TetherInstance | null;

  private constructor(natsUrl: string, names: TetherStoreNames, instance: TetherInstance) {
    this.#natsUrl = natsUrl;
    this.#names = names;
    this.#instance = instance;
  }

  static async start(natsUrl: string, names: TetherStoreNames): Promise<TetherHost> {
    return new TetherHost(natsUrl, names, await startTether(natsUrl, names));
  }

  get current(): TetherInstance {
    if (!this.#instance) throw new Error('no Tether server is running');
    return this.#instance;
  }

  /** Stops the server as SIGTERM does and starts a new one on the same port and store; the ms it took. */
  async restart(): Promise<number> {
    const t0 = performance.now();
    const { port } = this.current;
    await this.stop();
    this.#instance = await startTether(this.#natsUrl, this.#names, port);
    return performance.now() - t0;
  }

  async stop(): Promise<void> {
    const instance = this.#instance;
    this.#instance = null;
    await instance?.stop();
  }
}

/** An item of the REST events list. */
export interface Item {
  seq: number;
  event: unknown;
}

/** Every stored event of the conversation after `afterSeq`, through REST. */
export async function restEvents(base: string, user: string, id: string, afterSeq: number): Promise<Item[]> {
  const items: Item[] = [];
  for (let cursor = afterSeq; ;) {
    const page = await http<{ items: Item[]; has_more: boolean }>(
      base,
      user,
      `/api/conversations/${id}/events?after_seq=${cursor}&limit=1000`,
    );
    items.push(...page.items);
    if (!page.has_more || page.items.length === 0) return items;
    cursor = page.items.at(-1)!.seq;
  }
}
