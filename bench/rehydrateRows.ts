// Rows (c), (c2), (d): a passivated 10,000-event conversation brought back
// from its snapshot, through the manager, and by folding its whole log.
import type { BenchContext } from './benchContext.ts';
import { REHYDRATE_BUCKETS } from './buckets.ts';
import { busyMachine, cpuMeter, fmt, median, noiseNote, progress, repeat, type CpuUse, type Repetitions } from './measure.ts';
import { profileSection } from './profile.ts';
import { rawRead } from './readBench.ts';
import { foldParts, loadByFold, loadFromSnapshot, managerRehydrate, rawSnapshotRead, rehydrateFixture, type RehydrateFixture } from './rehydrateBench.ts';
import type { ProfileSection, Row } from './report.ts';

const EVENTS = 10_000;
const SNAPSHOT_TARGET_MS = 20;
const FOLD_TARGET = 2;

interface Pair {
  tether: number;
  raw: number;
  cpu: CpuUse;
  summary: string;
}

/** Runs Tether's and the baseline's step alternately first, as many times as `reps` says; medians. */
async function pairs(
  ctx: BenchContext,
  label: string,
  reps: Repetitions,
  tether: () => Promise<{ ms: number }>,
  raw: () => Promise<{ ms: number }>,
): Promise<{ tether: number; raw: number; kept: Pair[] }> {
  const { kept, discarded } = await repeat(
    label,
    reps,
    async (i): Promise<Pair> => {
      const cpu = cpuMeter(ctx.natsPid);
      const raw1 = i % 2 === 0 ? undefined : await raw();
      const t = await tether();
      const r = raw1 ?? (await raw());
      return { tether: t.ms, raw: r.ms, cpu: cpu(), summary: `Tether ${fmt.ms(t.ms)} ms; raw ${fmt.ms(r.ms)} ms` };
    },
    (p) => busyMachine(p.cpu),
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter((p) => busyMachine(p.cpu)).length));
  ctx.runs.push(`${label} runs (Tether / raw, ms): ${kept.map((p) => `${fmt.ms(p.tether)} / ${fmt.ms(p.raw)}`).join('; ')}`);
  return { tether: median(kept.map((p) => p.tether)), raw: median(kept.map((p) => p.raw)), kept };
}

export async function measureRehydrate(ctx: BenchContext, forceProfile: boolean): Promise<{ rows: Row[]; profiles: ProfileSection[] }> {
  const reps = ctx.quick
    ? { snapshot: { warmups: 2, runs: 7 }, manager: { warmups: 1, runs: 3 }, fold: { warmups: 1, runs: 3 } }
    : { snapshot: { warmups: 3, runs: 21 }, manager: { warmups: 1, runs: 9 }, fold: { warmups: 2, runs: 9 } };
  progress(`rehydration: building a conversation of ${fmt.int(EVENTS)} events through a SessionManager`);
  const f = await rehydrateFixture(ctx.nc, ctx.rawNc, EVENTS, ctx.runId, ctx.stepTimeoutMs);
  const profiles: ProfileSection[] = [];
  try {
    const n = fmt.int(f.events);
    ctx.notes.push(
      `The rehydration conversation (${n} events) was written by a real SessionManager in ${(f.buildMs / 1000).toFixed(1)} s, one chat round (4 events) at a time, then passivated: ${fmt.int((f.events / f.buildMs) * 1000)} events/s for one conversation whose every append waits for the one before.`,
    );
    const snap = await pairs(ctx, 'snapshot load', reps.snapshot, () => loadFromSnapshot(f), () => rawSnapshotRead(f));
    const fold = await pairs(ctx, 'full fold', reps.fold, () => loadByFold(f), () => rawRead(f.raw, ctx.stepTimeoutMs));
    const parts = [];
    for (let i = 0; i < reps.fold.runs; i++) parts.push(await foldParts(f));
    ctx.notes.push(
      `Full fold (d) split, timed apart (median of ${parts.length}): \`log.read\` of the ${n} events ${fmt.ms(median(parts.map((p) => p.readMs)))} ms, \`foldEvents\` ${fmt.ms(median(parts.map((p) => p.foldMs)))} ms (${fmt.int((median(parts.map((p) => p.foldMs)) * 1000) / f.events)} µs per event).`,
    );
    const foldRatio = fold.tether / fold.raw;
    if (foldRatio > FOLD_TARGET) {
      ctx.notes.push(`**Full-fold target missed**: ratio ${fmt.ratio(foldRatio)} against ≤ ${FOLD_TARGET}; Tether needs ≤ ${fmt.ms(fold.raw * FOLD_TARGET)} ms. See the rehydration profile below.`);
    }
    if (forceProfile || foldRatio > FOLD_TARGET) profiles.push(await profileFold(ctx, f));
    const manager = await pairs(ctx, 'manager.session', reps.manager, () => managerRehydrate(f), () => rawSnapshotRead(f));
    ctx.settings.push(...settings(f, reps));
    return {
      rows: [
        {
          measurement: `(c) rehydrate from snapshot: \`loadSessionState\` of a passivated ${n}-event conversation vs raw KV get of the snapshot + last-message direct get (median)`,
          tether: `${fmt.ms(snap.tether)} ms`,
          baseline: `${fmt.ms(snap.raw)} ms`,
          ratio: snap.tether / snap.raw,
          target: `< ${SNAPSHOT_TARGET_MS} ms`,
          pass: snap.tether < SNAPSHOT_TARGET_MS,
        },
        {
          measurement: '(c2) rehydrate through `manager.session()` (ownership check, snapshot load, actor started, `session_rehydrated` stored) vs the same raw reads (median)',
          tether: `${fmt.ms(manager.tether)} ms`,
          baseline: `${fmt.ms(manager.raw)} ms`,
          ratio: manager.tether / manager.raw,
          target: '— (no target)',
        },
        {
          measurement: `(d) rehydrate by full fold: \`loadSessionState\` with no snapshot (read + fold of ${n} events) vs raw ordered consumer read + JSON.parse (median)`,
          tether: `${fmt.ms(fold.tether)} ms`,
          baseline: `${fmt.ms(fold.raw)} ms`,
          ratio: foldRatio,
          target: `≤ ${FOLD_TARGET}`,
          pass: foldRatio <= FOLD_TARGET,
        },
      ],
      profiles,
    };
  } finally {
    await f.drop();
  }
}

function profileFold(ctx: BenchContext, f: RehydrateFixture): Promise<ProfileSection> {
  return profileSection(
    ctx.runId,
    'Rehydration by full fold',
    `Five \`loadSessionState\` calls with no snapshot (read and fold of ${fmt.int(f.events)} events each) under the CPU profiler.`,
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
    `Rehydration (c, c2, d): one conversation of ${fmt.int(f.events)} stored events, written through a real SessionManager (JetStream log, KV conversation and snapshot stores, scripted agent, in-memory runtime, default limits, so periodic snapshots too): start-up (created, runtime starting → connected, awaiting_user_input), then rounds of user message, \`running\`, agent reply, \`awaiting_user_input\`, each append chained on the expected last subject sequence, then passivated (runtime stopped, \`session_passivated\`, snapshot written to the KV bucket).`,
    `(c): \`loadSessionState(log, snapshots, id)\` with the passivation's snapshot (nothing after it to fold; checked: from snapshot, 0 folded, next event id = ${fmt.int(f.events)}), ${r(reps.snapshot)}. Baseline: what a snapshot load cannot avoid, raw on the baseline's connection: KV get of the snapshot key + JSON.parse, then a direct get of the subject's last message.`,
    `(c2): \`manager.session(id, user)\` on the passivated conversation, until it resolves with the live session (checked: the last stored event is \`session_rehydrated\` from \`snapshot\`); passivated again after each run, untimed, so each run adds two events. ${r(reps.manager)}, measured after (c) and (d).`,
    `(d): \`loadSessionState\` with a fresh, empty snapshot store, so the whole log is read and folded (checked: from log, ${fmt.int(f.events)} folded), against \`rawRead\` of (b) on the same subject (ordered consumer + JSON.parse), order alternating, ${r(reps.fold)}, busy runs run again as above.`,
  ];
}
