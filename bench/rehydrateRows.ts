// Rows (c), (c2), (c3), (d), (d2): a passivated 10,000-event conversation
// brought back from its snapshot, through the manager, and by folding its
// whole log, against raw JetStream reads and OpenHands' file layout.
import type { BenchContext } from './benchContext.ts';
import { REHYDRATE_BUCKETS } from './buckets.ts';
import {
  busyMachine,
  cpuMeter,
  fmt,
  median,
  noiseNote,
  progress,
  repeat,
  type CpuUse,
  type Repetitions,
} from './measure.ts';
import { profileSection } from './profile.ts';
import { rawRead } from './readBench.ts';
import { fileLayoutNote, fileLayoutSetting } from './fileLayoutText.ts';
import { PAGE_SIZE, readFileLayout, storedEventJson, writeFileLayout, type FileLayout } from './fileLayout.ts';
import {
  foldParts,
  loadByFold,
  loadFromSnapshot,
  managerRehydrate,
  rawSnapshotRead,
  rehydrateFixture,
  type RehydrateFixture,
} from './rehydrateBench.ts';
import type { ProfileSection, Row } from './report.ts';

const EVENTS = 10_000;
const SNAPSHOT_TARGET_MS = 20;
const FOLD_TARGET = 2;

interface Round {
  ms: number[];
  cpu: CpuUse;
  summary: string;
}

interface Side {
  name: string;
  run: () => Promise<{ ms: number }>;
}

/** Every order of `n` sides (n is small), the natural one first. */
export function orders(n: number): number[][] {
  if (n <= 1) return [[0]];
  return orders(n - 1).flatMap((rest) =>
    Array.from({ length: n }, (_, k) => [...rest.slice(0, n - 1 - k), n - 1, ...rest.slice(n - 1 - k)]),
  );
}

/**
 * Runs every side once per round, in a different order each round (all orders
 * in turn, so each side follows each other one equally often: the garbage one
 * leaves behind lands on all alike), as many rounds as `reps` says; the median per side.
 */
async function compare(
  ctx: BenchContext,
  label: string,
  reps: Repetitions,
  sides: readonly Side[],
): Promise<{ medians: number[]; kept: Round[] }> {
  const order = orders(sides.length);
  const { kept, discarded } = await repeat(
    label,
    reps,
    async (i): Promise<Round> => {
      const cpu = cpuMeter(ctx.natsPid);
      const ms = new Array<number>(sides.length).fill(0);
      for (const at of order[i % order.length]!) ms[at] = (await sides[at]!.run()).ms;
      return { ms, cpu: cpu(), summary: sides.map((s, k) => `${s.name} ${fmt.ms(ms[k]!)} ms`).join('; ') };
    },
    (r) => busyMachine(r.cpu),
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter((r) => busyMachine(r.cpu)).length));
  ctx.runs.push(
    `${label} runs (${sides.map((s) => s.name).join(' / ')}, ms): ${kept.map((r) => r.ms.map(fmt.ms).join(' / ')).join('; ')}`,
  );
  return { medians: sides.map((_, k) => median(kept.map((r) => r.ms[k]!))), kept };
}

/** Tether against one baseline: the first side is Tether's. */
async function pairs(
  ctx: BenchContext,
  label: string,
  reps: Repetitions,
  tether: Side['run'],
  raw: Side['run'],
): Promise<{ tether: number; raw: number }> {
  const { medians } = await compare(ctx, label, reps, [
    { name: 'Tether', run: tether },
    { name: 'raw', run: raw },
  ]);
  return { tether: medians[0]!, raw: medians[1]! };
}

export async function measureRehydrate(
  ctx: BenchContext,
  forceProfile: boolean,
): Promise<{ rows: Row[]; profiles: ProfileSection[] }> {
  const reps = ctx.quick
    ? { snapshot: { warmups: 2, runs: 7 }, manager: { warmups: 1, runs: 3 }, fold: { warmups: 1, runs: 3 } }
    : { snapshot: { warmups: 3, runs: 21 }, manager: { warmups: 1, runs: 9 }, fold: { warmups: 2, runs: 9 } };
  progress(`rehydration: building a conversation of ${fmt.int(EVENTS)} events through a NodeHost`);
  const f = await rehydrateFixture(ctx.nc, ctx.rawNc, EVENTS, ctx.runId, ctx.stepTimeoutMs);
  let files: FileLayout | undefined;
  const profiles: ProfileSection[] = [];
  try {
    ctx.notes.push(
      `The rehydration conversation (${fmt.int(f.events)} events) was written by a real NodeHost in ${(f.buildMs / 1000).toFixed(1)} s, one chat round (4 events) at a time, then passivated: ${fmt.int((f.events / f.buildMs) * 1000)} events/s for one conversation whose every append waits for the one before.`,
    );
    progress("rehydration: writing the same events in OpenHands' file layout");
    files = await writeFileLayout(
      f.conversationId,
      await storedEventJson(f.raw.js, f.raw.stream, f.raw.subject, f.events, ctx.stepTimeoutMs),
    );
    const snap = await pairs(
      ctx,
      'snapshot load',
      reps.snapshot,
      () => loadFromSnapshot(f),
      () => rawSnapshotRead(f),
    );
    const fold = await measureFold(ctx, f, files, reps.fold);
    if (forceProfile || fold.missed) profiles.push(await profileFold(ctx, f));
    const manager = await pairs(
      ctx,
      'manager.session',
      reps.manager,
      () => managerRehydrate(f),
      () => rawSnapshotRead(f),
    );
    ctx.settings.push(...settings(f, reps), fileLayoutSetting(files, reps.fold));
    return { rows: rowsOf(fmt.int(f.events), snap, manager, fold), profiles };
  } finally {
    await files?.remove();
    await f.drop();
  }
}

interface FoldFigures {
  foldMs: number;
  rawMs: number;
  filesMs: number;
  missed: boolean;
}

/** (d, d2): rounds of Tether's full fold, the raw JetStream read and the file-layout read; the split and any miss go to the notes. */
async function measureFold(
  ctx: BenchContext,
  f: RehydrateFixture,
  layout: FileLayout,
  reps: Repetitions,
): Promise<FoldFigures> {
  const n = fmt.int(f.events);
  const fold = await compare(ctx, 'full fold', reps, [
    { name: 'Tether', run: () => loadByFold(f) },
    { name: 'raw', run: () => rawRead(f.raw, ctx.stepTimeoutMs) },
    { name: 'file layout', run: async () => readFileLayout(layout) },
  ]);
  const [foldMs, rawMs, filesMs] = fold.medians as [number, number, number];
  const parts = [];
  for (let i = 0; i < reps.runs; i++) parts.push(await foldParts(f));
  const readMs = median(parts.map((p) => p.readMs));
  const foldOnlyMs = median(parts.map((p) => p.foldMs));
  ctx.notes.push(
    `Full fold (d) split, timed apart (median of ${parts.length}): \`log.read\` of the ${n} events ${fmt.ms(readMs)} ms, \`foldEvents\` ${fmt.ms(foldOnlyMs)} ms (${fmt.int((foldOnlyMs * 1000) / f.events)} µs per event).`,
    fileLayoutNote(layout, rawMs, filesMs, reps.runs),
  );
  const foldRatio = foldMs / rawMs;
  const filesRatio = foldMs / filesMs;
  if (foldRatio > FOLD_TARGET) {
    ctx.notes.push(
      `**Full-fold target missed**: ratio ${fmt.ratio(foldRatio)} against ≤ ${FOLD_TARGET}; Tether needs ≤ ${fmt.ms(rawMs * FOLD_TARGET)} ms. See the rehydration profile below.`,
    );
  }
  if (filesRatio >= 1) {
    ctx.notes.push(
      `**File-layout target missed**: the full fold (${fmt.ms(foldMs)} ms) is ${fmt.ratio(filesRatio)}× the file layout's read (${fmt.ms(filesMs)} ms), ${fmt.ms(foldMs - filesMs)} ms slower. ` +
        `Either half alone is slower than the whole file-layout read: \`log.read\` ${fmt.ms(readMs)} ms (${fmt.ratio(readMs / filesMs)}×; even the raw JetStream read is ${fmt.ratio(rawMs / filesMs)}×: ${n} messages, each through nats-server, TCP and the nats.js consumer, against ${fmt.int(layout.pages)} page files of ${PAGE_SIZE} events from a warm page cache) and \`foldEvents\` ${fmt.ms(foldOnlyMs)} ms (${fmt.ratio(foldOnlyMs / filesMs)}×: a machine transition per event, where the file layout only parses JSON and rebuilds no state). ` +
        'See the rehydration profile below for where the read and the fold spend it.',
    );
  }
  return { foldMs, rawMs, filesMs, missed: foldRatio > FOLD_TARGET || filesRatio >= 1 };
}

function rowsOf(
  n: string,
  snap: { tether: number; raw: number },
  manager: { tether: number; raw: number },
  fold: FoldFigures,
): Row[] {
  const { foldMs, rawMs, filesMs } = fold;
  return [
    {
      measurement: `(c) rehydrate from snapshot: \`readStoredState\` of a passivated ${n}-event conversation vs raw KV get of the snapshot + last-message direct get (median)`,
      tether: `${fmt.ms(snap.tether)} ms`,
      baseline: `${fmt.ms(snap.raw)} ms`,
      ratio: snap.tether / snap.raw,
      target: `< ${SNAPSHOT_TARGET_MS} ms`,
      pass: snap.tether < SNAPSHOT_TARGET_MS,
    },
    {
      measurement:
        '(c2) rehydrate through `manager.session()` (ownership check, snapshot load, actor started, `session_rehydrated` stored) vs the same raw reads (median)',
      tether: `${fmt.ms(manager.tether)} ms`,
      baseline: `${fmt.ms(manager.raw)} ms`,
      ratio: manager.tether / manager.raw,
      target: '— (no target)',
    },
    {
      measurement: `(c3) rehydrate from snapshot (c) vs reading the ${n} events back from OpenHands' file layout (one JSON file per event + ${PAGE_SIZE}-event pages, page cache warm; median of (d2)'s reads)`,
      tether: `${fmt.ms(snap.tether)} ms`,
      baseline: `${fmt.ms(filesMs)} ms`,
      ratio: snap.tether / filesMs,
      target: '— (no target)',
    },
    {
      measurement: `(d) rehydrate by full fold: \`readStoredState\` with no snapshot (read + fold of ${n} events) vs raw ordered consumer read (pulls bounded to 8 MiB) + JSON.parse (median)`,
      tether: `${fmt.ms(foldMs)} ms`,
      baseline: `${fmt.ms(rawMs)} ms`,
      ratio: foldMs / rawMs,
      target: `≤ ${FOLD_TARGET}`,
      pass: foldMs / rawMs <= FOLD_TARGET,
    },
    {
      measurement: `(d2) rehydrate by full fold (d) vs reading the same ${n} events back from OpenHands' file layout (list the events dir, ${PAGE_SIZE}-event pages, JSON.parse; page cache warm) (median)`,
      tether: `${fmt.ms(foldMs)} ms`,
      baseline: `${fmt.ms(filesMs)} ms`,
      ratio: foldMs / filesMs,
      target: '< 1 (faster)',
      pass: foldMs / filesMs < 1,
    },
  ];
}

function profileFold(ctx: BenchContext, f: RehydrateFixture): Promise<ProfileSection> {
  return profileSection(
    ctx.runId,
    'Rehydration by full fold',
    `Five \`readStoredState\` calls with no snapshot (read and fold of ${fmt.int(f.events)} events each) under the CPU profiler.`,
    REHYDRATE_BUCKETS,
    (around) =>
      around(async () => {
        for (let i = 0; i < 5; i++) await loadByFold(f);
      }),
  );
}

function settings(f: RehydrateFixture, reps: Record<'snapshot' | 'manager' | 'fold', Repetitions>): string[] {
  const r = (x: Repetitions) => `${x.warmups} warm-up + ${x.runs} measured runs`;
  return [
    `Rehydration (c, c2, c3, d, d2): one conversation of ${fmt.int(f.events)} stored events, written through a real NodeHost (JetStream log, KV conversation and snapshot stores, scripted agent, in-memory runtime, default limits, so periodic snapshots too): start-up (created, runtime starting → connected, awaiting_user_input), then rounds of user message, \`running\`, agent reply, \`awaiting_user_input\`, each append chained on the expected last subject sequence, then passivated (runtime stopped, \`session_passivated\`, snapshot written to the KV bucket).`,
    `(c): \`readStoredState(log, snapshots, id)\` with the passivation's snapshot (nothing after it to fold; checked: from snapshot, 0 folded, next event id = ${fmt.int(f.events)}), ${r(reps.snapshot)}. Baseline: what a snapshot load cannot avoid, raw on the baseline's connection: KV get of the snapshot key + JSON.parse, then a direct get of the subject's last message.`,
    `(c2): \`manager.session(id, user)\` on the passivated conversation, until it resolves with the live session (checked: the last stored event is \`session_rehydrated\` from \`snapshot\`); passivated again after each run, untimed, so each run adds two events. ${r(reps.manager)}, measured after (c) and (d).`,
    `(d): \`readStoredState\` with a fresh, empty snapshot store, so the whole log is read and folded (checked: from log, ${fmt.int(f.events)} folded), against \`rawRead\` of (b) on the same subject (ordered consumer + JSON.parse), in rounds with the file-layout read of (d2), each round in another order (all six in turn), ${r(reps.fold)}, busy runs run again as above.`,
  ];
}
