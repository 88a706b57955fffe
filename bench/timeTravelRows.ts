// Rows (m), (m2), (n) to (n3): the state at random past events of a
// 10,000-event conversation, folded from the owner's checkpoints, against a
// fold from its creation; forks of prefixes against appending their events.
import { randomInt } from 'node:crypto';
import type { BenchContext, Measured } from './benchContext.ts';
import { percentile } from './latencyStats.ts';
import {
  busyMachine,
  cpuMeter,
  fmt,
  inTurn,
  median,
  noiseNote,
  progress,
  repeat,
  type CpuUse,
  type Repetitions,
} from './measure.ts';
import { SEEK_BUCKETS } from './buckets.ts';
import { profileSection } from './profile.ts';
import type { ProfileSection, Row } from './report.ts';
import {
  appendCopy,
  checkSeek,
  forkAt,
  fullFold,
  seek,
  timeTravelFixture,
  type TimeTravelFixture,
} from './timeTravelBench.ts';

const SEEK_TARGET = 0.1;
const PROFILED_SEEKS = 100;

interface Plan {
  events: number;
  /** Rounds of one full fold and `seeksPerRound` seeks. */
  seekRounds: Repetitions;
  seeksPerRound: number;
  /** Seeks checked against the fold from the creation, untimed. */
  checkedSeeks: number;
  prefixes: number[];
  forkRounds: (prefix: number) => Repetitions;
}

const PLANS: Record<'full' | 'quick', Plan> = {
  full: {
    events: 10_000,
    seekRounds: { warmups: 2, runs: 10 },
    seeksPerRound: 20,
    checkedSeeks: 5,
    prefixes: [100, 1_000, 10_000],
    forkRounds: (n) => (n > 1_000 ? { warmups: 1, runs: 3 } : { warmups: 2, runs: 7 }),
  },
  quick: {
    events: 2_000,
    seekRounds: { warmups: 1, runs: 5 },
    seeksPerRound: 10,
    checkedSeeks: 3,
    prefixes: [100, 1_000, 2_000],
    forkRounds: () => ({ warmups: 1, runs: 3 }),
  },
};

export async function measureTimeTravel(ctx: BenchContext, forceProfile: boolean): Promise<Measured> {
  const plan = ctx.quick ? PLANS.quick : PLANS.full;
  progress(`time travel: building a conversation of ${fmt.int(plan.events)} events through a NodeHost`);
  const f = await timeTravelFixture(ctx.nc, plan.events, ctx.runId, ctx.stepTimeoutMs);
  const pick = () => f.events[randomInt(f.events.length)]!.seq;
  const profiles: ProfileSection[] = [];
  try {
    const n = f.events.length;
    const built = `The time-travel conversation (${fmt.int(n)} events) was written by a real NodeHost in ${(f.buildMs / 1000).toFixed(1)} s, one chat round at a time, then passivated; its owner wrote ${f.checkpointSeqs.length} checkpoints.`;
    ctx.notes.push(built);
    progress(built);
    for (let i = 0; i < plan.checkedSeeks; i++) await checkSeek(f, pick());
    const seeks = await measureSeeks(ctx, f, plan, pick);
    if (forceProfile || seekMissed(ctx, seeks)) profiles.push(await profileSeeks(ctx, f, pick));
    const forks = [];
    for (const prefix of plan.prefixes) forks.push(await measureForks(ctx, f, prefix, plan.forkRounds(prefix)));
    ctx.settings.push(settings(f, plan));
    return { rows: [...seekRows(n, seeks), ...forks.map(forkRow)], profiles };
  } finally {
    await f.drop();
  }
}

interface SeekRound {
  foldMs: number;
  seekMs: number[];
  cpu: CpuUse;
  summary: string;
}

interface Seeks {
  /** Every measured seek, and every full fold (one a round). */
  seekMs: number[];
  foldMs: number[];
}

/** Rounds of one full fold and a run of seeks, the fold first in every other round. */
async function measureSeeks(ctx: BenchContext, f: TimeTravelFixture, plan: Plan, pick: () => number): Promise<Seeks> {
  const { kept, discarded } = await repeat(
    'seek',
    plan.seekRounds,
    async (i): Promise<SeekRound> => {
      const cpu = cpuMeter(ctx.natsPid);
      const seekMs: number[] = [];
      const seeks = async () => {
        for (let k = 0; k < plan.seeksPerRound; k++) seekMs.push(await seek(f, pick()));
      };
      const [foldMs] = await inTurn(i, () => fullFold(f), seeks);
      const summary = `full fold ${fmt.ms(foldMs)} ms; ${seekMs.length} seeks p50 ${fmt.ms(median(seekMs))} ms, max ${fmt.ms(Math.max(...seekMs))} ms`;
      return { foldMs, seekMs, cpu: cpu(), summary };
    },
    (r) => busyMachine(r.cpu),
  );
  ctx.notes.push(noiseNote('seek', kept.length, discarded.length, kept.filter((r) => busyMachine(r.cpu)).length));
  ctx.runs.push(`seek rounds (full fold ms; seeks, ms): ${kept.map((r) => r.summary).join('; ')}`);
  return { seekMs: kept.flatMap((r) => r.seekMs), foldMs: kept.map((r) => r.foldMs) };
}

/** Whether the seek missed its target; the miss is noted (the profile below says where the time went). */
function seekMissed(ctx: BenchContext, s: Seeks): boolean {
  const fold = median(s.foldMs);
  const p50 = percentile(s.seekMs, 50);
  const p99 = percentile(s.seekMs, 99);
  if (p50 / fold <= SEEK_TARGET && p99 / fold <= SEEK_TARGET) return false;
  const miss = `**Seek target missed**: p50 ${fmt.ms(p50)} ms (${fmt.ratio(p50 / fold)}), p99 ${fmt.ms(p99)} ms (${fmt.ratio(p99 / fold)}) against ≤ ${SEEK_TARGET} of the full fold's p50 ${fmt.ms(fold)} ms. See the seek profile below.`;
  ctx.notes.push(miss);
  progress(miss);
  return true;
}

function seekRows(n: number, s: Seeks): Row[] {
  const fold = median(s.foldMs);
  const base = `${fmt.ms(fold)} ms (full fold p50 of ${s.foldMs.length})`;
  const what = `\`manager.stateAt(id, user, seq)\` (what \`GET /api/conversations/:id/state?at_seq=\` runs) at ${s.seekMs.length} random seqs of a ${fmt.int(n)}-event conversation on NATS, folded from the nearest checkpoint before each (the owner's, every 100 events)`;
  const against = `vs the p50 of full folds: the same \`stateAt\` of the last event on an identical manager whose checkpoint store is empty (all ${fmt.int(n)} events read and folded)`;
  const row = (label: string, ms: number): Row => ({
    measurement: `${label} ${what}, ${label === '(m)' ? 'p50' : 'p99'} ${against}`,
    tether: `${fmt.ms(ms)} ms (${label === '(m)' ? 'p50' : 'p99'})`,
    baseline: base,
    ratio: ms / fold,
    target: `≤ ${SEEK_TARGET}`,
    pass: ms / fold <= SEEK_TARGET,
  });
  return [row('(m)', percentile(s.seekMs, 50)), row('(m2)', percentile(s.seekMs, 99))];
}

interface ForkRound {
  forkMs: number;
  appendMs: number;
  cpu: CpuUse;
  summary: string;
}

interface Forks {
  prefix: number;
  forkMs: number;
  appendMs: number;
  runs: number;
}

/** Rounds of one fork of the `prefix`-event prefix and one sequential append of it, in turn first. */
async function measureForks(
  ctx: BenchContext,
  f: TimeTravelFixture,
  prefix: number,
  reps: Repetitions,
): Promise<Forks> {
  const label = `fork of ${fmt.int(prefix)} events`;
  const { kept, discarded } = await repeat(
    label,
    reps,
    async (i): Promise<ForkRound> => {
      const cpu = cpuMeter(ctx.natsPid);
      const [forkMs, appendMs] = await inTurn(
        i,
        () => forkAt(f, prefix),
        () => appendCopy(f, prefix),
      );
      return { forkMs, appendMs, cpu: cpu(), summary: `fork ${fmt.ms(forkMs)} ms; append ${fmt.ms(appendMs)} ms` };
    },
    (r) => busyMachine(r.cpu),
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter((r) => busyMachine(r.cpu)).length));
  ctx.runs.push(
    `${label} runs (fork / append, ms): ${kept.map((r) => `${fmt.ms(r.forkMs)} / ${fmt.ms(r.appendMs)}`).join('; ')}`,
  );
  return {
    prefix,
    forkMs: median(kept.map((r) => r.forkMs)),
    appendMs: median(kept.map((r) => r.appendMs)),
    runs: kept.length,
  };
}

function forkRow(r: Forks, i: number): Row {
  const n = fmt.int(r.prefix);
  const time = (ms: number) => (ms >= 1_000 ? fmt.int(ms) : fmt.ms(ms));
  const perK = (ms: number) => `${time(ms)} ms (${fmt.ms((ms / r.prefix) * 1000)} ms per 1,000 events)`;
  return {
    measurement: `(n${i === 0 ? '' : i + 1}) fork of a ${n}-event prefix: \`manager.fork(parent, user, atSeq)\` (what \`POST /api/conversations/:id/fork\` runs) until it returns (the parent's events read and folded, ${n} copies appended one after the other with their checkpoints, the fork's first decision stored), median of ${r.runs}, vs appending the same ${n} events to a fresh conversation with \`log.append\`, each expecting the one before (the floor of a sequential copy), median`,
    tether: perK(r.forkMs),
    baseline: perK(r.appendMs),
    ratio: r.forkMs / r.appendMs,
    target: '— (no target)',
  };
}

async function profileSeeks(ctx: BenchContext, f: TimeTravelFixture, pick: () => number): Promise<ProfileSection> {
  const section = await profileSection(
    ctx.runId,
    'Seek to a past event',
    `${PROFILED_SEEKS} \`manager.stateAt\` calls at random seqs, one after the other, under the CPU profiler. The profile holds this node process only; the time spent waiting for nats-server shows as idle.`,
    SEEK_BUCKETS,
    (around) =>
      around(async () => {
        for (let i = 0; i < PROFILED_SEEKS; i++) await seek(f, pick());
      }),
  );
  const total = section.summary.totalMs;
  const shares = section.shares.map((b) => `${b.label} ${fmt.ms(b.ms)} ms (${((b.ms / total) * 100).toFixed(0)}%)`);
  progress(`seek profile (${fmt.int(total)} ms of samples): ${shares.join('; ')}`);
  return section;
}

function settings(f: TimeTravelFixture, plan: Plan): string {
  const r = (x: Repetitions) => `${x.warmups} warm-up + ${x.runs} measured rounds`;
  const forkRounds = plan.prefixes.map((p) => `${fmt.int(p)}: ${r(plan.forkRounds(p))}`).join(', ');
  return [
    `Time travel (m, m2, n to n3): one conversation of ${fmt.int(f.events.length)} stored events written as the rehydration conversation is (a real NodeHost through \`createTether\` on bench stores: JetStream log, KV conversation, snapshot and checkpoint stores; scripted agent, in-memory runtime, default limits, so a checkpoint each time the event count passes a multiple of 100), then passivated. A second manager (\`createTether\`) on the same stores but with an empty in-memory checkpoint store is the baseline of (m).`,
    `(m, m2): rounds of one full fold (the second manager's \`stateAt\` of the last event) and ${plan.seeksPerRound} seeks (the owner's \`stateAt\` at a seq drawn uniformly from the conversation's events), the fold first in every other round; ${r(plan.seekRounds)}, busy rounds run again; p50 and nearest-rank p99 of every measured seek, each divided by the p50 (median) of the rounds' full folds. Before timing, ${plan.checkedSeeks} seeks are checked to equal the fold from the creation at the same seq.`,
    `(n to n3): rounds of one \`manager.fork\` at the prefix's last event (afterwards, untimed: the fork's log checked, the fork deleted through \`manager.delete\`) and one sequential append of the same events under a fresh conversation id through the EventLog (afterwards purged), the fork first in every other round; ${forkRounds}; medians.`,
  ].join(' ');
}
