// The density step's Tether server: tetherServer + NodeHost (JetStream
// log, KV stores, scripted agent, in-memory runtimes) on a real port, in a node
// process of its own started with --expose-gc by densityRuns.ts, so its heap
// holds the server and nothing of the bench. densityRuns.ts drives it over IPC.
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { TetherServer } from '../src/server/index.ts';
import { connectNats, type NatsConnection } from '../src/store/index.ts';
import type { ServerMemory } from './bareWsServer.ts';
import { heapByKind, type HeapKind } from './densitySnapshot.ts';
import {
  answerCommands,
  benchTether,
  benchUser,
  createStarted,
  memoryNow,
  passivateAll,
  type BenchTether,
} from './heapBench.ts';

/** The conversation `first + i` belongs to user benchUser(first + i); a client names its user with `?bench_user=`. */
export const USER_PARAM = 'bench_user';

/** Started conversations, the seq of the last stored event of each (a connecting client's cursor), and how long it took. */
export interface Created {
  ids: string[];
  cursors: number[];
  ms: number;
}

export interface TetherMemory extends ServerMemory {
  /** Sessions in memory (actors). */
  liveCount: number;
}

export type DensityProtocol = {
  start: { args: { natsUrl: string; tag: string }; reply: { port: number } };
  create: { args: { count: number; first: number }; reply: Created };
  measure: { args: object; reply: TetherMemory };
  passivate: { args: { ids: string[] }; reply: { ms: number } };
  delete: { args: { ids: string[]; first: number }; reply: null };
  heapByKind: { args: object; reply: HeapKind[] };
  close: { args: object; reply: null };
};

const authenticate = async (_req: IncomingMessage, url: URL): Promise<string> =>
  url.searchParams.get(USER_PARAM) ?? 'local';

let nc: NatsConnection | null = null;
let sessions: BenchTether | null = null;
let server: TetherServer | null = null;

function started(): { sessions: BenchTether; server: TetherServer } {
  if (!sessions || !server) throw new Error('the density server is not started');
  return { sessions, server };
}

answerCommands<DensityProtocol>({
  start: async ({ natsUrl, tag }) => {
    nc = await connectNats(natsUrl, { name: 'tether-bench-density' });
    sessions = await benchTether(nc, 'density', tag, { authenticate });
    server = sessions.tether.server;
    return { port: (await sessions.tether.listen(0, '127.0.0.1')).port };
  },
  create: async ({ count, first }) => {
    const { host } = started().sessions.tether;
    const t0 = performance.now();
    const ids = await createStarted(host, count, first);
    const ms = performance.now() - t0;
    const cursors = await Promise.all(ids.map(async (id, i) => (await host.session(id, benchUser(first + i))).lastSeq));
    return { ids, cursors, ms };
  },
  measure: async () => {
    const { sessions, server } = started();
    return { ...(await memoryNow()), connections: server.ws.clientCount, liveCount: sessions.tether.host.liveCount };
  },
  passivate: async ({ ids }) => {
    const t0 = performance.now();
    // The call the passivation policy makes for an idle session (connections or not).
    await passivateAll(started().sessions.tether.host, ids, 'idle');
    return { ms: performance.now() - t0 };
  },
  delete: async ({ ids, first }) => {
    const { host } = started().sessions.tether;
    for (const [i, id] of ids.entries()) await host.commands.delete(id, benchUser(first + i));
    return null;
  },
  heapByKind,
  close: async () => {
    try {
      await sessions?.dispose();
    } finally {
      await nc?.close();
      [nc, sessions, server] = [null, null, null];
    }
    return null;
  },
});
