// The density step's Tether server: tetherServer + SessionManager (JetStream
// log, KV stores, scripted agent, in-memory runtimes) on a real port, in a node
// process of its own started with --expose-gc by densityRows.ts, so its heap
// holds the server and nothing of the bench. densityRows.ts drives it over IPC.
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { silentLogger } from '../src/logger.ts';
import { tetherServer, type TetherServer } from '../src/server/index.ts';
import { connectNats, type NatsConnection } from '../src/store/index.ts';
import type { ServerMemory } from './bareWsServer.ts';
import { heapByKind, type HeapKind } from './densitySnapshot.ts';
import { answerCommands, benchSessions, benchUser, createStarted, memoryNow, passivateAll, type BenchSessions } from './heapBench.ts';

/** Conversations `first` .. `first + count - 1` belong to users benchUser(first) ...; a client names its user with `?bench_user=`. */
export const USER_PARAM = 'bench_user';

export type DensityCommand =
  | { type: 'start'; natsUrl: string; tag: string }
  | { type: 'create'; count: number; first: number }
  | { type: 'measure' }
  | { type: 'passivate'; ids: string[] }
  | { type: 'delete'; ids: string[]; first: number }
  | { type: 'heapByKind' }
  | { type: 'close' };

/** A started conversation and the seq of its last stored event (a connecting client's cursor). */
export interface Created {
  ids: string[];
  cursors: number[];
  ms: number;
}

export interface TetherMemory extends ServerMemory {
  /** Sessions in memory (actors). */
  liveCount: number;
}

export type DensityReply = { port: number } | Created | TetherMemory | { ms: number } | HeapKind[] | null;

const authenticate = async (_req: IncomingMessage, url: URL): Promise<string> => url.searchParams.get(USER_PARAM) ?? 'local';

let nc: NatsConnection | null = null;
let sessions: BenchSessions | null = null;
let server: TetherServer | null = null;

function started(): { sessions: BenchSessions; server: TetherServer } {
  if (!sessions || !server) throw new Error('the density server is not started');
  return { sessions, server };
}

async function handle(command: DensityCommand): Promise<DensityReply> {
  switch (command.type) {
    case 'start': {
      nc = await connectNats(command.natsUrl, { name: 'tether-bench-density' });
      sessions = await benchSessions(nc, 'density', command.tag);
      server = tetherServer({ manager: sessions.manager, logger: silentLogger, maxFrameBytes: 1 << 20, maxBodyBytes: 1 << 20, authenticate });
      return { port: (await server.listen(0, '127.0.0.1')).port };
    }
    case 'create': {
      const { manager } = started().sessions;
      const t0 = performance.now();
      const ids = await createStarted(manager, command.count, command.first);
      const ms = performance.now() - t0;
      const cursors = await Promise.all(ids.map(async (id, i) => (await manager.session(id, benchUser(command.first + i))).lastSeq));
      return { ids, cursors, ms };
    }
    case 'measure': {
      const { sessions, server } = started();
      return { ...(await memoryNow()), connections: server.ws.clientCount, liveCount: sessions.manager.liveCount };
    }
    case 'passivate': {
      const t0 = performance.now();
      // The same call the passivation policy makes for an idle session (connections or not).
      await passivateAll(started().sessions.manager, command.ids, 'idle');
      return { ms: performance.now() - t0 };
    }
    case 'delete': {
      const { manager } = started().sessions;
      for (const [i, id] of command.ids.entries()) await manager.delete(id, benchUser(command.first + i));
      return null;
    }
    case 'heapByKind':
      return heapByKind();
    case 'close': {
      try {
        await server?.close();
        await sessions?.manager.shutdown();
        await sessions?.dispose();
      } finally {
        await nc?.close();
        [nc, sessions, server] = [null, null, null];
      }
      return null;
    }
  }
}

answerCommands(handle);
