// (h) Cold start: a new conversation from the create call to
// `awaiting_user_input`, with a real local runtime (a bash per conversation),
// on the JetStream log and KV stores; through the manager and through the
// HTTP API + a ws client; against spawning a bare bash and hearing from it.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { protocolClient, type ProtocolClient } from '../src/client/index.ts';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { CreateConversationBody, type LoggedEvent } from '../protocol/index.ts';
import { localRuntimeProvider, type Runtime, type RuntimeProvider } from '../src/runtime/index.ts';
import type { NodeHost } from '../src/host/index.ts';
import { jetStreamStores, type NatsConnection } from '../src/store/index.ts';
import { createTether, type Tether } from '../src/tether.ts';
import { BenchSocket } from './benchSocket.ts';
import { benchStoreNames, deleteBenchStores } from './benchStores.ts';
import { listened, within } from './measure.ts';

/** The user the HTTP API sees when no tokens are configured; the manager runs use the same. */
const USER = 'local';

export interface ColdStartFixture {
  manager: NodeHost;
  /** Where the workspaces live (a temporary data dir, removed by `drop`). */
  dataDir: string;
  baseUrl: string;
  wsUrl: string;
  /** Every runtime the provider made, to check that none is left running. */
  runtimes: Runtime[];
  timeoutMs: number;
  /** The id the manager gives the next conversation it creates (set by the bench before each create). */
  ids: { next: string };
  drop(): Promise<void>;
}

/**
 * A NodeHost as `tether serve` wires it (JetStream log, KV conversation
 * and snapshot stores, local runtimes under the data dir, scripted agent),
 * behind a Tether server on a loopback port. Ids come from the bench, so a
 * conversation can be subscribed to before it is created.
 */
export async function coldStartFixture(nc: NatsConnection, tag: string, timeoutMs: number): Promise<ColdStartFixture> {
  const names = benchStoreNames('cold', tag);
  const dataDir = await mkdtemp(join(tmpdir(), 'tether-bench-cold-'));
  const runtimes: Runtime[] = [];
  const local = localRuntimeProvider({ workspaceRoot: join(dataDir, 'workspaces') });
  const tracked: RuntimeProvider = {
    create(conversationId, options) {
      const runtime = local.create(conversationId, options);
      runtimes.push(runtime);
      return runtime;
    },
  };
  let tether: Tether | undefined;
  const drop = async () => {
    await tether?.close();
    await Promise.allSettled(runtimes.map((r) => r.stop()));
    await deleteBenchStores(nc, names);
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    const ids = { next: '' };
    tether = createTether({
      stores: await jetStreamStores(nc, names),
      runtimes: tracked,
      agent: scriptedAgent(),
      logger: silentLogger,
      newId: () => ids.next,
    });
    const address = await tether.listen(0, '127.0.0.1');
    return {
      manager: tether.host,
      dataDir,
      baseUrl: `http://127.0.0.1:${address.port}`,
      wsUrl: `ws://127.0.0.1:${address.port}`,
      runtimes,
      timeoutMs,
      ids,
      drop,
    };
  } catch (err) {
    await drop();
    throw err;
  }
}

export interface ColdStart {
  conversationId: string;
  ms: number;
  /** When each start-up event was stored (published to the manager's feed), ms after the create call. */
  marks: Array<[string, number]>;
  /** When `manager.create()` resolved, ms after the call. */
  createdMs: number;
}

/** `agent_state_changed:awaiting_user_input`, `runtime_status:connected`, ... */
function label(event: LoggedEvent['event']): string {
  const data = event.data as { status?: string; state?: string };
  return `${event.type}${data.status ? `:${data.status}` : data.state ? `:${data.state}` : ''}`;
}

const isIdle = (event: LoggedEvent['event']) =>
  event.type === 'agent_state_changed' && event.data.state === 'awaiting_user_input';

/**
 * One cold start through the manager: subscribed to the new id first, then
 * from `manager.create()` until its `awaiting_user_input` state fact is stored
 * and `create()` has resolved. The session stays live: `closeColdStart` it.
 */
export async function managerColdStart(fx: ColdStartFixture): Promise<ColdStart> {
  const id = randomUUID().replaceAll('-', '');
  fx.ids.next = id;
  const marks: Array<[string, number]> = [];
  let idleAt = 0;
  let reached!: () => void;
  const idle = new Promise<void>((resolve) => (reached = resolve));
  let t0 = 0;
  const unsubscribe = await listened(
    fx.manager.feed.listen(id, 0, {
      event: ({ event }) => {
        const at = performance.now() - t0;
        marks.push([label(event), at]);
        if (isIdle(event)) {
          idleAt = at;
          reached();
        }
      },
      status: () => {},
    }),
  );
  const body = CreateConversationBody.parse({});
  try {
    t0 = performance.now();
    const created = await fx.manager.commands.create(USER, body);
    const createdMs = performance.now() - t0;
    if (created.conversation_id !== id) throw new Error(`created ${created.conversation_id}, expected ${id}`);
    await within(fx.timeoutMs, 'a cold start', idle);
    const session = await fx.manager.session(id, USER);
    if (session.state !== 'awaiting_user_input' || session.snapshot?.context.runtime !== 'connected') {
      throw new Error(
        `cold start of ${id} ended ${session.state} with the runtime ${session.snapshot?.context.runtime}`,
      );
    }
    return { conversationId: id, ms: Math.max(idleAt, createdMs), marks, createdMs };
  } finally {
    unsubscribe();
  }
}

/** Passivates a cold-started session: its runtime (the bash) is stopped, its workspace kept. */
export async function closeColdStart(fx: ColdStartFixture, conversationId: string): Promise<void> {
  await fx.manager.passivate(conversationId, 'close_delay');
  if (fx.manager.isLive(conversationId)) throw new Error(`${conversationId} is still live after passivation`);
}

/**
 * One cold start as a client sees it: `POST /api/conversations` (201), then a
 * ws client on `/ws?conversation_id=` until it receives the stored
 * `awaiting_user_input` event. The socket is closed afterwards; the session
 * stays live: `closeColdStart` it.
 */
export async function httpColdStart(fx: ColdStartFixture): Promise<ColdStart> {
  fx.ids.next = randomUUID().replaceAll('-', '');
  const t0 = performance.now();
  const res = await fetch(`${fx.baseUrl}/api/conversations`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  if (res.status !== 201) throw new Error(`POST /api/conversations: HTTP ${res.status} ${await res.text()}`);
  const { conversation_id: id } = (await res.json()) as { conversation_id: string };
  const createdMs = performance.now() - t0;
  let client: ProtocolClient<BenchSocket> | undefined;
  let done = false;
  try {
    const ms = await within(
      fx.timeoutMs,
      'a cold start over HTTP and ws',
      new Promise<number>((resolve, reject) => {
        client = protocolClient({
          WebSocket: BenchSocket,
          url: `${fx.wsUrl}/ws?conversation_id=${id}`,
          reconnect: false,
          handlers: {
            event: (frame) => {
              if (isIdle(frame.event)) resolve(performance.now() - t0);
            },
            error: (frame) => reject(new Error(`ws error frame: ${frame.message}`)),
            invalid: (frame) => reject(new Error(`ws of ${id}: ${frame.problem}: ${frame.raw.slice(0, 300)}`)),
            socketError: (event) => reject((event as { error?: Error }).error ?? new Error('socket error')),
            close: ({ code }) => {
              if (!done) reject(new Error(`ws of ${id} closed (${code}) before awaiting_user_input`));
            },
          },
        });
      }),
    );
    return { conversationId: id, ms, marks: [], createdMs };
  } finally {
    done = true;
    client?.socket?.terminate();
  }
}

/**
 * The floor of a local runtime's start: spawn a bare bash (same flags as the
 * runtime's, no prelude) and wait for the answer to one `echo`. Killed
 * afterwards, untimed.
 */
export async function bareBash(fx: ColdStartFixture): Promise<{ ms: number }> {
  const t0 = performance.now();
  const child = spawn('bash', ['--noprofile', '--norc'], { cwd: fx.dataDir, stdio: 'pipe' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await within(
      fx.timeoutMs,
      'a bare bash',
      new Promise<void>((resolve, reject) => {
        let out = '';
        child.once('error', reject);
        child.once('exit', (code) => reject(new Error(`bash exited (${code}) before answering`)));
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          if (out.includes('ready\n')) resolve();
        });
        child.stdin.write('echo ready\n');
      }),
    );
    return { ms: performance.now() - t0 };
  } finally {
    child.kill('SIGKILL');
    await exited;
  }
}
