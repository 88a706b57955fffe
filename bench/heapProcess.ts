// (e) The heap of one NodeHost with N live sessions, then with the same
// N passivated. Runs in its own node process (spawned by heapBench.ts with
// --expose-gc), so nothing else of the bench is on its heap. Reports over IPC.
import { performance } from 'node:perf_hooks';
import { createActor } from 'xstate';
import { inputFrom, sessionMachine } from '../machines/index.ts';
import { EVENT_VERSION, StoredEvent } from '../protocol/index.ts';
import { connectNats } from '../src/store/index.ts';
import { answerCommands, benchTether, createStarted, heapUsed, passivateAll } from './heapBench.ts';

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

export type HeapProtocol = { measure: { args: HeapRequest; reply: HeapReport } };

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
  const machineCopyBytes = await bytesEach(() => sessionMachine.provide({ actions: { clearDeadline: noop } }));
  return { bareActorBytes, machineCopyBytes };
}

async function measure(request: HeapRequest): Promise<HeapReport> {
  const { natsUrl, sessions, tag } = request;
  const nc = await connectNats(natsUrl, { name: 'tether-bench-heap' });
  try {
    const { tether, dispose } = await benchTether(nc, 'heap', tag);
    const { host } = tether;
    let measured: Omit<HeapReport, 'bareActorBytes' | 'machineCopyBytes'>;
    try {
      const emptyBytes = await heapUsed();
      const t0 = performance.now();
      const ids = await createStarted(host, sessions);
      const createMs = performance.now() - t0;
      const liveCountWhenLive = host.liveCount;
      const liveBytes = await heapUsed();
      const t1 = performance.now();
      await passivateAll(host, ids, 'close_delay');
      const passivateMs = performance.now() - t1;
      const liveCountWhenPassivated = host.liveCount;
      const passivatedBytes = await heapUsed();
      measured = {
        sessions,
        emptyBytes,
        liveBytes,
        passivatedBytes,
        liveCountWhenLive,
        liveCountWhenPassivated,
        createMs,
        passivateMs,
      };
    } finally {
      await dispose();
    }
    return { ...measured, ...(await references()) };
  } finally {
    await nc.close();
  }
}

answerCommands<HeapProtocol>({ measure });
