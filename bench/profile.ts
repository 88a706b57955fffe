// In-process CPU profiling (node:inspector) and a summary of where the time
// went: by function (self and total) and by area (src/, machines/, packages, node).
import { Session } from 'node:inspector/promises';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { progress } from './measure.ts';
import type { ProfileSection } from './report.ts';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface HotSpot {
  where: string;
  selfMs: number;
  totalMs: number;
}

export interface ProfileSummary {
  totalMs: number;
  areas: Array<{ area: string; selfMs: number }>;
  functions: HotSpot[];
}

/** Profiles `work` and returns its result with the profile. */
export async function profiled<T>(work: () => Promise<T>): Promise<{ result: T; profile: CpuProfile }> {
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 200 });
    await session.post('Profiler.start');
    let result: T;
    try {
      result = await work();
    } catch (err) {
      await session.post('Profiler.stop').catch(() => undefined);
      throw err;
    }
    const { profile } = (await session.post('Profiler.stop')) as { profile: CpuProfile };
    return { result, profile: withoutProfiler(profile) };
  } finally {
    session.disconnect();
  }
}

export async function saveProfile(path: string, profile: CpuProfile): Promise<void> {
  await writeFile(path, JSON.stringify(profile));
}

/**
 * Profiles the phase that `work` wraps in `around` (set-up and checks stay
 * outside), saves the profile under the temporary directory and summarises it.
 */
export async function profileSection(
  runId: string,
  title: string,
  note: string,
  buckets: readonly Bucket[],
  work: (around: <T>(timed: () => Promise<T>) => Promise<T>) => Promise<unknown>,
): Promise<ProfileSection> {
  progress(`profiling: ${title}`);
  let profile: CpuProfile | undefined;
  await work(async (timed) => {
    const run = await profiled(timed);
    profile = run.profile;
    return run.result;
  });
  if (!profile) throw new Error(`profiling ${title}: the timed phase never ran`);
  const file = join(tmpdir(), `tether-bench-${runId}-${title.replace(/\W+/g, '-').toLowerCase()}.cpuprofile`);
  await saveProfile(file, profile);
  return {
    title,
    note,
    file,
    summary: summarise(profile),
    shares: attribute(profile, buckets),
    src: [...inclusiveIn(profile, 'src/'), ...inclusiveIn(profile, 'machines/', 5)],
  };
}

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function shortUrl(url: string): string {
  if (!url) return '';
  const path = url.startsWith('file://') ? fileURLToPath(url) : url;
  return path.startsWith(ROOT) ? path.slice(ROOT.length) : path;
}

/** Which part of the program a frame belongs to. */
export function areaOf(frame: CallFrame): string {
  const path = shortUrl(frame.url);
  if (!path) return frame.functionName.startsWith('(') ? frame.functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (pkg) return pkg[1]!;
  if (path.startsWith('node:')) return 'node core';
  if (path.startsWith('src/') || path.startsWith('machines/')) return path.split('/').slice(0, 2).join('/');
  if (path.startsWith('bench/')) return 'bench harness';
  return path;
}

function label(frame: CallFrame): string {
  const name = frame.functionName || '(anonymous)';
  const path = shortUrl(frame.url);
  // tsx compiles a .ts file onto one line: its line numbers say nothing.
  if (!path || path.endsWith('.ts')) return path ? `${name} ${path}` : name;
  return `${name} ${path}:${frame.lineNumber + 1}`;
}

/** Samples taken while the profiler itself was stopping (node:inspector on the stack) are not the program's. */
function withoutProfiler(profile: CpuProfile): CpuProfile {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const inProfiler = (id: number): boolean => {
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      if (byId.get(at)!.callFrame.url === 'node:inspector') return true;
    }
    return false;
  };
  const keep = profile.samples.map((id) => !inProfiler(id));
  return {
    ...profile,
    samples: profile.samples.filter((_, i) => keep[i]),
    timeDeltas: profile.timeDeltas.filter((_, i) => keep[i]),
  };
}

/** Self time per area and per function, and total (inclusive) time per function. */
export function summarise(profile: CpuProfile, top = 25): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000));
  const fnTotal = totalsOf(profile);
  const areas = new Map<string, number>();
  const fnSelf = new Map<string, number>();
  for (const [id, ms] of self) {
    const node = byId.get(id)!;
    const key = areaOf(node.callFrame);
    areas.set(key, (areas.get(key) ?? 0) + ms);
    const fn = label(node.callFrame);
    fnSelf.set(fn, (fnSelf.get(fn) ?? 0) + ms);
  }
  const totalMs = [...self.values()].reduce((a, b) => a + b, 0);
  const functions = [...fnSelf.entries()]
    .map(([where, selfMs]) => ({ where, selfMs, totalMs: fnTotal.get(where) ?? selfMs }))
    .sort((a, b) => b.selfMs - a.selfMs)
    .slice(0, top);
  return {
    totalMs,
    areas: [...areas.entries()].map(([area, selfMs]) => ({ area, selfMs })).sort((a, b) => b.selfMs - a.selfMs),
    functions,
  };
}

/** The heaviest functions of one area by inclusive time (e.g. every src/ function on the stack). */
export function inclusiveIn(profile: CpuProfile, prefix: string, top = 15): HotSpot[] {
  const byName = new Map(summarise(profile, Number.MAX_SAFE_INTEGER).functions.map((f) => [f.where, f]));
  return [...totalsOf(profile).entries()]
    .filter(([where]) => where.includes(` ${prefix}`))
    .map(([where, totalMs]) => ({ where, totalMs, selfMs: byName.get(where)?.selfMs ?? 0 }))
    .sort((a, b) => b.totalMs - a.totalMs)
    .slice(0, top);
}

/** Inclusive time per function: each function counted once per sample, however often it recurses. */
function totalsOf(profile: CpuProfile): Map<string, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const totals = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const ms = (profile.timeDeltas[i] ?? 0) / 1000;
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const name = label(byId.get(at)!.callFrame);
      if (!seen.has(name)) totals.set(name, (totals.get(name) ?? 0) + ms);
      seen.add(name);
    }
  });
  return totals;
}

/** A named share of the profile: a sample belongs to the first bucket whose test accepts its stack (leaf first). */
export interface Bucket {
  label: string;
  test: (stack: readonly CallFrame[]) => boolean;
}

/** Splits the samples into buckets by what is on their stack; the rest goes to "everything else". */
export function attribute(profile: CpuProfile, buckets: readonly Bucket[]): Array<{ label: string; ms: number }> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const totals = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const stack: CallFrame[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) stack.push(byId.get(at)!.callFrame);
    const label = buckets.find((b) => b.test(stack))?.label ?? 'everything else';
    totals.set(label, (totals.get(label) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  return [...totals.entries()].map(([label, ms]) => ({ label, ms })).sort((a, b) => b.ms - a.ms);
}

/** Stack tests for buckets: a frame whose function name (and, optionally, file) matches. */
export const onStack =
  (name: string | RegExp, file?: string) =>
  (stack: readonly CallFrame[]): boolean =>
    stack.some(
      (f) =>
        (typeof name === 'string' ? f.functionName === name : name.test(f.functionName)) &&
        (file === undefined || f.url.includes(file)),
    );
