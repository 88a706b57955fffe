// Small measuring helpers shared by the benchmarks: medians, repetitions,
// time bounds that fail loudly, and CPU accounting for node and nats-server.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

export class BenchTimeoutError extends Error {
  override readonly name = 'BenchTimeoutError';
  readonly code = 'BENCH_TIMEOUT';
}

export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median of nothing');
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The work's result, or a BenchTimeoutError naming the step once `ms` pass. */
export async function within<T>(ms: number, step: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new BenchTimeoutError(`${step} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs `a` and `b`, `a` first in even rounds and `b` first in odd ones (so neither always runs warm). */
export async function inTurn<A, B>(round: number, a: () => Promise<A>, b: () => Promise<B>): Promise<[A, B]> {
  if (round % 2 === 0) {
    const first = await a();
    return [first, await b()];
  }
  const second = await b();
  return [await a(), second];
}

export interface Repetitions {
  warmups: number;
  runs: number;
}

export interface Repeated<T> {
  kept: T[];
  /** Measured runs thrown away and run again because other processes were busy meanwhile. */
  discarded: T[];
}

/**
 * Runs `once` for the warm-ups, then until `runs` measured runs are kept. A run
 * that `noisy` rejects (the machine was busy with something else) is run again,
 * at most `runs` extra times; after that noisy runs are kept, and the report says so.
 */
export async function repeat<T>(
  label: string,
  reps: Repetitions,
  once: (index: number) => Promise<T>,
  noisy: (result: T) => boolean = () => false,
): Promise<Repeated<T>> {
  const kept: T[] = [];
  const discarded: T[] = [];
  for (let i = 0; i < reps.warmups; i++) progress(`${label} warm-up ${i + 1}: ${describe(await once(i))}`);
  for (let i = reps.warmups; kept.length < reps.runs; i++) {
    const result = await once(i);
    const redo = noisy(result) && discarded.length < reps.runs;
    progress(
      `${label} run ${kept.length + 1}/${reps.runs}: ${describe(result)}${redo ? ' [other processes busy: run again]' : ''}`,
    );
    (redo ? discarded : kept).push(result);
  }
  return { kept, discarded };
}

/**
 * True when other processes used more than a fifth of a core while it ran.
 * /proc counts in 10 ms ticks, so short runs also need a few ticks' margin.
 */
export function busyMachine(use: Pick<CpuUse, 'restMs' | 'wallMs'>): boolean {
  return use.restMs > 0.2 * use.wallMs && use.restMs > 5 * TICK_MS;
}

function describe(result: unknown): string {
  return typeof result === 'object' && result !== null && 'summary' in result ? String(result.summary) : '';
}

export function progress(line: string): void {
  process.stderr.write(`[bench] ${line}\n`);
}

export interface CpuUse {
  wallMs: number;
  /** This process (the Tether server or the baseline, and their NATS clients). */
  nodeMs: number;
  /** The nats-server process. */
  natsMs: number;
  /** The bench's client process (the append run's ws clients), 0 when there is none. */
  clientsMs: number;
  /** Every other process on the machine: high means the figures are noisy. */
  restMs: number;
}

/**
 * Starts measuring CPU time (user + system) of this process, nats-server and,
 * when given, the bench's client process; the returned function stops and reports it.
 */
export function cpuMeter(natsPid: number, clientsPid?: number): () => CpuUse {
  const node0 = process.cpuUsage();
  const nats0 = procCpuMs(natsPid);
  const clients0 = clientsPid === undefined ? 0 : procCpuMs(clientsPid);
  const busy0 = machineBusyMs();
  const t0 = performance.now();
  return () => {
    const node = process.cpuUsage(node0);
    const nodeMs = (node.user + node.system) / 1000;
    const natsMs = procCpuMs(natsPid) - nats0;
    const clientsMs = clientsPid === undefined ? 0 : procCpuMs(clientsPid) - clients0;
    const restMs = Math.max(0, machineBusyMs() - busy0 - nodeMs - natsMs - clientsMs);
    return { wallMs: performance.now() - t0, nodeMs, natsMs, clientsMs, restMs };
  };
}

/** CPU time (ms) of named processes over a stretch of wall time, and of everything else on the machine. */
export interface ProcessesCpu {
  wallMs: number;
  byName: Record<string, number>;
  /** Every other process, this one included. */
  restMs: number;
}

/**
 * Starts measuring CPU time (user + system) of each named process (Linux
 * /proc, 10 ms ticks); the returned function stops and reports it.
 */
export function processesCpuMeter(pids: Readonly<Record<string, number>>): () => ProcessesCpu {
  const start = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, procCpuMs(pid)]));
  const busy0 = machineBusyMs();
  const t0 = performance.now();
  return () => {
    const byName = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, procCpuMs(pid) - start[name]!]));
    const named = Object.values(byName).reduce((a, b) => a + b, 0);
    return { wallMs: performance.now() - t0, byName, restMs: Math.max(0, machineBusyMs() - busy0 - named) };
  };
}

export function describeCpu(use: CpuUse): string {
  const clients = use.clientsMs ? `, client process ${fmt.int(use.clientsMs)} ms` : '';
  return `cpu: node ${fmt.int(use.nodeMs)} ms, nats-server ${fmt.int(use.natsMs)} ms${clients}, other processes ${fmt.int(use.restMs)} ms`;
}

// USER_HZ: /proc reports CPU time in ticks of 10 ms on Linux.
const TICK_MS = 10;

/** utime + stime of a Linux process in ms (0 where /proc is not there). */
function procCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return 0;
  }
}

/** CPU time the whole machine spent busy (all but idle and iowait), in ms. */
function machineBusyMs(): number {
  try {
    const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
    const values = ticks.slice(0, 8).map(Number);
    const total = values.reduce((a, b) => a + b, 0);
    return (total - values[3]! - values[4]!) * TICK_MS;
  } catch {
    return 0;
  }
}

export const fmt = {
  int: (n: number) => Math.round(n).toLocaleString('en-US'),
  ms: (n: number) => (n >= 100 ? n.toFixed(0) : n.toFixed(1)),
  ratio: (n: number) => n.toFixed(2),
};

/** Whether other processes disturbed a measurement, in one line for the notes. */
export function noiseNote(label: string, kept: number, discarded: number, stillBusy: number): string {
  const redone = discarded
    ? `${discarded} ${label} run(s) were run again because other processes used over 20% of a core meanwhile`
    : '';
  if (stillBusy)
    return `**Noisy machine**: ${redone ? `${redone}, and ` : ''}${stillBusy} of the ${kept} kept ${label} runs still had other processes using over 20% of a core; those figures are less reliable.`;
  return redone
    ? `${redone}; the ${kept} kept runs had a quiet machine.`
    : `All ${kept} ${label} runs had a quiet machine (other processes under 20% of a core).`;
}

/** An in-process listener of the feed once it has caught up with what was stored, as its stop function. */
export async function listened(listening: { caughtUp: Promise<void>; stop(): void }): Promise<() => void> {
  await listening.caughtUp;
  return () => listening.stop();
}
