// Host one: a Tether built by `createTether()` in a child process of its own
// (JetStream log and KV stores on names of the run, scripted agent), listening
// on loopback. Callers name themselves with a token that is their user name,
// as `tether serve` callers do with theirs. Functions below `hosted` run in
// the child; TetherHost is the bench's handle on it.
import type { IncomingMessage } from 'node:http';
import { jetstreamManager } from '@nats-io/jetstream';
import { scriptedAgent } from '../../src/agent/index.ts';
import { silentLogger } from '../../src/logger.ts';
import { localRuntimeProvider, type RuntimeProvider } from '../../src/runtime/index.ts';
import { MemoryRuntime, echoHandler, type CommandHandler } from '../../src/runtime/memoryRuntime.ts';
import { connectNats, jetStreamStores, type NatsConnection, type Stores } from '../../src/store/index.ts';
import { createTether, type Tether } from '../../src/tether.ts';
import { track, untrack, until } from './measure.ts';
import { Proc, type ProcOptions } from './proc.ts';
import type { Ctx } from './scenario.ts';
import type { Frame } from './fleet.ts';

export interface HostOptions {
  natsUrl: string;
  /** Names the stream and buckets (kept across a restart, deleted by `stop`). */
  tag: string;
  /** `thinking`: the scripted agent thinks for 10 minutes after the first message, so each later user message is one event. */
  agent?: 'scripted' | 'thinking';
  /** The scripted agent streams each reply a few words per delta, this far apart (default: no deltas). */
  deltaMs?: number;
  /** `memory` (echo), `cat` (each command prints 1 KiB), or `local` (a bash per conversation under `workspaces`). */
  runtime?: 'memory' | 'cat' | 'local';
  workspaces?: string;
  /** Listen on this port (a restart keeps its port, so that clients reconnect to it). */
  port?: number;
  /** The id of the next conversation comes from `nextId` (cold start subscribes before it creates). */
  fixedIds?: boolean;
}

export const storeNames = (tag: string) => ({
  stream: `BENCH_${tag}`,
  subjectPrefix: `bench.${tag}`,
  conversationBucket: `bench_${tag}_conversations`,
  snapshotBucket: `bench_${tag}_snapshots`,
  checkpointBucket: `bench_${tag}_checkpoints`,
});

/** Deletes a tag's stream and buckets. */
export async function deleteStores(nc: NatsConnection, tag: string): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const n = storeNames(tag);
  const kv = [n.conversationBucket, n.snapshotBucket, n.checkpointBucket].map((b) => `KV_${b}`);
  for (const s of [n.stream, ...kv]) await jsm.streams.delete(s).catch(() => false);
}

/** The bench's callers: `Authorization: Bearer <user>` on REST, `?token=<user>` on the WebSocket. */
const authenticate = async (req: IncomingMessage, url: URL) =>
  url.searchParams.get('token') ?? req.headers.authorization?.slice('Bearer '.length) ?? 'local';

/** What every command of the `cat` runtime prints: 16 lines of 64 characters that differ per command. */
const catHandler: CommandHandler = (command) => ({
  exit_code: 0,
  output: Array.from({ length: 16 }, (_, i) => `${command} line ${i} `.padEnd(63, '.') + '\n').join(''),
  timed_out: false,
  truncated: false,
});

// The child's Tether: one per host process.
let here: { tether: Tether; nc: NatsConnection; stores: Stores; options: HostOptions; nextId: string } | undefined;

/** The Tether of this host process, for scenario functions called in it. */
export function hosted() {
  if (!here) throw new Error('no Tether runs in this process');
  return here;
}

export async function startTether(options: HostOptions): Promise<{ port: number }> {
  const nc = await connectNats(options.natsUrl, { name: `tether-bench-${options.tag}` });
  const stores = await jetStreamStores(nc, storeNames(options.tag));
  const handler = options.runtime === 'cat' ? catHandler : echoHandler;
  // Keeps no list of the runtimes it made: the bench must not hold sessions in memory.
  const memory: RuntimeProvider = { create: (id, o) => new MemoryRuntime(id, handler, o) };
  const tether = createTether({
    stores,
    runtimes: options.runtime === 'local' ? localRuntimeProvider({ workspaceRoot: options.workspaces! }) : memory,
    agent: scriptedAgent({ delayMs: options.agent === 'thinking' ? 10 * 60_000 : 0, deltaMs: options.deltaMs }),
    logger: silentLogger,
    newId: options.fixedIds ? () => hosted().nextId : undefined,
    server: { authenticate },
  });
  here = { tether, nc, stores, options, nextId: '' };
  const address = await tether.listen(options.port ?? 0, '127.0.0.1');
  return { port: address.port };
}

/** Closes the Tether; its stores stay (the bench deletes them). */
export async function stopTether(): Promise<void> {
  await here?.tether.close();
  await here?.nc.close();
  here = undefined;
}

/** A JSON REST call as `user` (GET without a body, POST with one); throws on a non-2xx answer. */
export async function rest<T>(base: string, user: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${base}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${user}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** Creates a conversation as `user` and waits until it awaits input; its id and last seq (the clients' cursor). */
export async function startedConversation(base: string, user: string, body: object = {}) {
  const { conversation_id: id } = await rest<{ conversation_id: string }>(base, user, '/api/conversations', body);
  const seq = await until(`conversation ${id} start-up`, async () => {
    const info = await rest<{ state: string; last_seq: number }>(base, user, `/api/conversations/${id}`);
    return info.state === 'awaiting_user_input' ? info.last_seq : undefined;
  });
  return { id, seq };
}

/**
 * Sends a first message to a conversation that awaits input, so that its
 * agent starts thinking, and waits until that is stored (running, its last
 * seq the same twice in a row); its id and last seq (the clients' cursor).
 */
export async function thinkingConversation(base: string, user: string, id: string) {
  const action = { type: 'message', content: 'the message that starts the agent' };
  await rest(base, user, `/api/conversations/${id}/actions`, { action });
  let last = -1;
  const seq = await until(`conversation ${id} thinking`, async () => {
    const info = await rest<{ state: string; last_seq: number }>(base, user, `/api/conversations/${id}`);
    const settled = info.state === 'running' && info.last_seq === last;
    last = info.last_seq;
    return settled ? info.last_seq : undefined;
  });
  return { id, seq };
}

/** The bench's handle on a host process. */
export class TetherHost {
  private constructor(
    readonly options: HostOptions,
    readonly proc: Proc,
    readonly port: number,
  ) {}

  static async start(ctx: Ctx, options: Omit<HostOptions, 'natsUrl'>, proc: ProcOptions = {}): Promise<TetherHost> {
    const all = { ...options, natsUrl: ctx.natsUrl };
    // With --profile, the host's whole life is profiled.
    const p = new Proc('host', { cpuProfDir: ctx.profile ? ctx.profileDir : undefined, ...proc });
    track('host', p.pid);
    try {
      const { port } = await p.call(import.meta.url, startTether, [all]);
      return new TetherHost(all, p, port);
    } catch (err) {
      await p.stop();
      throw err;
    }
  }

  get base(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get ws(): string {
    return `ws://127.0.0.1:${this.port}`;
  }

  /** Closes the Tether as SIGTERM closes `tether serve` and builds a new one in the same process, on the same stores and port. */
  async restart(): Promise<void> {
    await this.proc.call(import.meta.url, stopTether, []);
    await this.proc.call(import.meta.url, startTether, [{ ...this.options, port: this.port }]);
  }

  /** Stops the Tether and its process, and deletes its stores. */
  async stop(nc: NatsConnection): Promise<void> {
    await this.proc.call(import.meta.url, stopTether, []).catch(() => undefined);
    await this.proc.stop();
    untrack('host');
    await deleteStores(nc, this.options.tag);
  }
}

type Item = { seq: number; event: unknown };

/** Every stored event of a conversation after the cursor, over REST, page by page. */
export async function restEvents(base: string, user: string, id: string, afterSeq: number): Promise<Item[]> {
  const items: Item[] = [];
  for (let cursor = afterSeq; ;) {
    const path = `/api/conversations/${id}/events?after_seq=${cursor}&limit=1000`;
    const page = await rest<{ items: Item[]; has_more: boolean }>(base, user, path);
    items.push(...page.items);
    if (!page.has_more || page.items.length === 0) return items;
    cursor = page.items.at(-1)!.seq;
  }
}

/** Each client got every stored event after the cursor once, in order, byte for byte; returns the stored JSON. */
export async function checkFrames(base: string, user: string, id: string, afterSeq: number, got: Frame[][]) {
  const stored = await restEvents(base, user, id, afterSeq);
  const json = stored.map((i) => JSON.stringify(i.event));
  for (const frames of got) {
    if (frames.length !== stored.length)
      throw new Error(`${id}: ${stored.length} events stored, ${frames.length} frames received`);
    frames.forEach(([seq, text], i) => {
      if (seq !== stored[i]!.seq || text !== json[i])
        throw new Error(`${id}: frame ${i} (seq ${seq}) differs from the log's seq ${stored[i]!.seq}`);
    });
  }
  return json;
}
