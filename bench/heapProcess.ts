// (e) The heap of one SessionManager with N live sessions, then with the same
// N passivated. Runs in its own node process (spawned by heapBench.ts with
// --expose-gc), so nothing else of the bench is on its heap. Reports over IPC.
import { performance } from 'node:perf_hooks';
import { jetstreamManager } from '@nats-io/jetstream';
import pLimit from 'p-limit';
import { createActor } from 'xstate';
import { inputFrom, sessionMachine } from '../machines/index.ts';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { CreateConversationBody, EVENT_VERSION, StoredEvent } from '../src/protocol/index.ts';
import { MemoryRuntime, echoHandler } from '../src/runtime/memoryRuntime.ts';
import type { RuntimeProvider } from '../src/runtime/index.ts';
import { SessionManager } from '../src/session/index.ts';
import { connectNats, jetStreamEventLog, kvConversationStore, kvSnapshotStore } from '../src/store/index.ts';

export interface HeapRequest {
  natsUrl: string;
  sessions: number;
  tag: string;
}

export interface HeapReport {
  sessions: number;
  /** heapUsed after full GCs, in bytes. */
  emptyBytes: number;
  liveBytes: number;
  passivatedBytes: number;
  liveCountWhenLive: number;
  liveCountWhenPassivated: number;
  createMs: number;
  passivateMs: number;
  /** References, per object: an actor of the shared session machine, and one `sessionMachine.provide()` copy. */
  bareActorBytes: number;
  machineCopyBytes: number;
}

const REFERENCE_COUNT = 1_000;

/** Heap per object of `make`, over REFERENCE_COUNT objects kept alive at once. */
async function bytesEach(make: () => unknown): Promise<number> {
  const before = await heapUsed();
  const kept = Array.from({ length: REFERENCE_COUNT }, make);
  const after = await heapUsed();
  kept.length = 0;
  return (after - before) / REFERENCE_COUNT;
}

/** What a live session holds besides its actor's state: for comparison with the live figure. */
async function references(): Promise<Pick<HeapReport, 'bareActorBytes' | 'machineCopyBytes'>> {
  const created = StoredEvent.parse({
    v: EVENT_VERSION,
    id: 0,
    conversation_id: 'reference',
    ts: new Date().toISOString(),
    source: 'user',
    type: 'conversation_created',
    data: { user: 'u', confirmation_mode: false, max_iterations: 100, secret_names: [], replay: false },
  });
  if (created.type !== 'conversation_created') throw new Error('unreachable');
  const input = inputFrom(created);
  const noop = () => {};
  const bareActorBytes = await bytesEach(() => createActor(sessionMachine, { input }).start());
  const machineCopyBytes = await bytesEach(() => sessionMachine.provide({ actions: { startRuntime: noop, askAgent: noop, runCommand: noop } }));
  return { bareActorBytes, machineCopyBytes };
}

const gc = (globalThis as { gc?: () => void }).gc;

async function heapUsed(): Promise<number> {
  if (!gc) throw new Error('run with node --expose-gc');
  // Let timers and pending I/O callbacks settle, then collect until the heap stops shrinking.
  await new Promise((resolve) => setTimeout(resolve, 100));
  let used = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 5; i++) {
    gc();
    const now = process.memoryUsage().heapUsed;
    if (now >= used) break;
    used = now;
  }
  return used;
}

/** Like memoryRuntimeProvider, but keeps no list of what it made: the bench must not hold sessions' runtimes. */
const runtimes: RuntimeProvider = { create: (id, options) => new MemoryRuntime(id, echoHandler, options) };

async function measure(request: HeapRequest): Promise<HeapReport> {
  const { natsUrl, sessions, tag } = request;
  const nc = await connectNats(natsUrl, { name: 'tether-bench-heap' });
  const stream = `BENCH_HEAP_${tag}`;
  const buckets = [`bench_heap_conversations_${tag}`, `bench_heap_snapshots_${tag}`];
  try {
    const manager = new SessionManager({
      log: await jetStreamEventLog(nc, { stream, subjectPrefix: `bench.heap${tag}` }),
      conversations: await kvConversationStore(nc, { bucket: buckets[0] }),
      snapshots: await kvSnapshotStore(nc, { bucket: buckets[1] }),
      runtimes,
      agentFor: () => scriptedAgent(),
      logger: silentLogger,
    });
    const emptyBytes = await heapUsed();
    const limit = pLimit(200);
    const body = CreateConversationBody.parse({});
    const t0 = performance.now();
    const ids = await Promise.all(
      Array.from({ length: sessions }, (_, i) => limit(async () => (await manager.create(`u${i}`, body)).conversation_id)),
    );
    // Start-up (runtime, then awaiting_user_input) runs after create returns.
    for (const [i, id] of ids.entries()) {
      while ((await manager.session(id, `u${i}`)).state !== 'awaiting_user_input') await new Promise((r) => setTimeout(r, 10));
    }
    const createMs = performance.now() - t0;
    const liveCountWhenLive = manager.liveCount;
    const liveBytes = await heapUsed();
    const t1 = performance.now();
    await Promise.all(ids.map((id) => limit(() => manager.passivate(id, 'close_delay'))));
    const passivateMs = performance.now() - t1;
    const liveCountWhenPassivated = manager.liveCount;
    const passivatedBytes = await heapUsed();
    await manager.shutdown();
    return { sessions, emptyBytes, liveBytes, passivatedBytes, liveCountWhenLive, liveCountWhenPassivated, createMs, passivateMs, ...(await references()) };
  } finally {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(stream).catch(() => false);
    for (const bucket of buckets) await jsm.streams.delete(`KV_${bucket}`).catch(() => false);
    await nc.close();
  }
}

process.once('message', (request: HeapRequest) => {
  measure(request).then(
    (report) => process.send?.({ ok: true, report }, () => process.exit(0)),
    (err: unknown) => process.send?.({ ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }, () => process.exit(1)),
  );
});
