// Statistics, time bounds, and the CPU and memory of every process of the run
// (from Linux /proc): the bench, nats-server, and every child it started.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';

export const progress = (line: string) => process.stderr.write(`[bench] ${line}\n`);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median of nothing');
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The p-th percentile by nearest rank: a value that was measured, never interpolated. */
export function percentile(values: ArrayLike<number>, p: number): number {
  if (values.length === 0) throw new RangeError('percentile of nothing');
  const s = Float64Array.from(values).sort();
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export const fmt = {
  int: (n: number) => Math.round(n).toLocaleString('en-US'),
  ms: (n: number) => (n >= 100 ? Math.round(n).toLocaleString('en-US') : n.toFixed(1)),
  ratio: (n: number) => (Number.isFinite(n) ? n.toFixed(2) : String(n)),
  kib: (bytes: number) => (bytes / 1024).toFixed(2),
  mib: (bytes: number) => (bytes / 2 ** 20).toFixed(1),
};

/** The work's result, or an error naming the step once `ms` pass. */
export async function within<T>(ms: number, step: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${step} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `probe` every `everyMs` until it returns something other than undefined. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000, everyMs = 20) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

// The processes whose CPU and memory every timed phase reports, by name.
const tracked = new Map<string, number>([['bench', process.pid]]);
export const track = (name: string, pid: number) => void tracked.set(name, pid);
export const untrack = (name: string) => void tracked.delete(name);

const TICK_MS = 10; // /proc counts CPU time in ticks of 10 ms (USER_HZ).
function statFields(pid: number): string[] {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return [];
  }
}
const cpuMs = (pid: number) => {
  const f = statFields(pid);
  return f.length ? (Number(f[11]) + Number(f[12])) * TICK_MS : 0;
};
/** Resident set size of a process in bytes (0 once it is gone). */
export const rssBytes = (pid: number) => Number(statFields(pid)[21] ?? 0) * 4096;
function machineBusyMs(): number {
  const v = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  return (v.reduce((a, b) => a + b, 0) - v[3]! - v[4]!) * TICK_MS;
}

export interface Timed<T> {
  value: T;
  ms: number;
  /** CPU time (user + system) of each tracked process over the phase, in ms. */
  cpu: Record<string, number>;
  /** RSS of each tracked process at the end, in bytes. */
  rss: Record<string, number>;
  /** CPU time of every other process on the machine: high means the figures are noisy. */
  otherMs: number;
}

/** Runs `work`, timing it and counting every tracked process's CPU meanwhile. */
export async function timed<T>(work: () => Promise<T>): Promise<Timed<T>> {
  const pids = [...tracked];
  const cpu0 = pids.map(([, pid]) => cpuMs(pid));
  const busy0 = machineBusyMs();
  const t0 = performance.now();
  const value = await work();
  const ms = performance.now() - t0;
  const cpu = Object.fromEntries(pids.map(([name, pid], i) => [name, Math.max(0, cpuMs(pid) - cpu0[i]!)]));
  const ours = Object.values(cpu).reduce((a, b) => a + b, 0);
  const rss = Object.fromEntries(pids.map(([name, pid]) => [name, rssBytes(pid)]));
  return { value, ms, cpu, rss, otherMs: Math.max(0, machineBusyMs() - busy0 - ours) };
}

/** Other processes used over a fifth of a core while it ran (with a few ticks' margin). */
export const busy = (t: Pick<Timed<unknown>, 'ms' | 'otherMs'>) => t.otherMs > 0.2 * t.ms && t.otherMs > 5 * TICK_MS;

export function describeUse(t: Timed<unknown>): string {
  const cpu = Object.entries(t.cpu)
    .filter(([, ms]) => ms > 0)
    .map(([n, ms]) => `${n} ${fmt.int(ms)}`);
  const rss = Object.entries(t.rss)
    .filter(([, b]) => b > 0)
    .map(([n, b]) => `${n} ${fmt.mib(b)}`);
  return `CPU ms: ${cpu.join(', ')}, other processes ${fmt.int(t.otherMs)}; RSS MiB: ${rss.join(', ')}`;
}

/** heapUsed once full GCs stop shrinking it (needs --expose-gc), the compiled code in it, and the RSS. */
export async function memory(): Promise<{ heap: number; code: number; rss: number }> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('memory() needs a process started with gc: true');
  await sleep(100);
  let heap = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 5; i++) {
    gc();
    const now = process.memoryUsage().heapUsed;
    if (now >= heap) break;
    heap = now;
  }
  const code = getHeapSpaceStatistics()
    .filter((s) => s.space_name.startsWith('code_'))
    .reduce((n, s) => n + s.space_used_size, 0);
  return { heap, code, rss: process.memoryUsage().rss };
}
