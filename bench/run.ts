// `npm run bench [-- --quick] [-- --profile] [-- --only=step,...]`: starts its
// own nats-server on a temporary store and measures, in this one run with every
// baseline beside it: the append path (a) and the read path (b) against raw
// JetStream, rehydration of a 10,000-event conversation (c, d), the heap of
// 10,000 live and passivated sessions (e), resume after a drop (f), density of
// ws connections (g), cold start (h) and the host's CPU per agent
// step in a long conversation against a short one (i), failover in a cluster
// of three nodes on a 3-node NATS cluster, against the lease (j), and on such a
// cluster delivery to a non-owner node against the owner (k) and throughput on
// three nodes against one (l), and on a 10,000-event conversation the state at
// a past event from the nearest checkpoint against a full fold (m) and forks
// of 100 to 10,000 events against appending them (n). Writes bench/RESULTS.md
// and prints the table. Exits 1 on any error or timeout; a missed target is
// reported (and profiled), not an error.
import { rmSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ensureNatsServer } from '../scripts/nats-binary.js';
import { connectNats, startEmbeddedNats, type EmbeddedNats, type NatsConnection } from '../src/store/index.ts';
import { measureAgentStep } from './agentStepRows.ts';
import { measureAppend } from './appendRows.ts';
import { CODE_KIND, RESULTS_FILE } from './benchFiles.ts';
import type { BenchContext, Measure } from './benchContext.ts';
import { measureCluster } from './clusterRows.ts';
import { measureColdStart } from './coldStartRows.ts';
import { measureDensity } from './densityRows.ts';
import { measureFailover } from './failoverRows.ts';
import { measureHeap } from './heapRows.ts';
import { progress } from './measure.ts';
import { measureRead } from './readRows.ts';
import { measureRehydrate } from './rehydrateRows.ts';
import { measureResume } from './resumeRows.ts';
import { measureTimeTravel } from './timeTravelRows.ts';
import {
  codeVersion,
  commandLine,
  describeMachine,
  renderMarkdown,
  tableLines,
  type ProfileSection,
  type Report,
  type Row,
} from './report.ts';

const quick = process.argv.includes('--quick');
const forceProfile = process.argv.includes('--profile');

/** The steps, in the order they run and their rows appear. */
const STEPS: ReadonlyArray<{ name: string; measure: Measure }> = [
  { name: 'append', measure: measureAppend },
  { name: 'read', measure: measureRead },
  { name: 'rehydrate', measure: measureRehydrate },
  { name: 'heap', measure: async (ctx) => ({ rows: await measureHeap(ctx), profiles: [] }) },
  { name: 'resume', measure: measureResume },
  { name: 'density', measure: measureDensity },
  { name: 'coldstart', measure: measureColdStart },
  { name: 'agentstep', measure: async (ctx) => measureAgentStep(ctx) },
  { name: 'failover', measure: async (ctx) => measureFailover(ctx) },
  { name: 'cluster', measure: async (ctx) => measureCluster(ctx) },
  { name: 'timetravel', measure: measureTimeTravel },
];
// `--only=append,resume` runs those steps and prints their rows without writing RESULTS.md.
const only = process.argv
  .find((a) => a.startsWith('--only='))
  ?.slice('--only='.length)
  .split(',');
const unknownSteps = only?.filter((name) => !STEPS.some((s) => s.name === name)) ?? [];
if (unknownSteps.length > 0) {
  process.stderr.write(
    `[bench] unknown step(s) ${unknownSteps.join(', ')}; the steps are ${STEPS.map((s) => s.name).join(', ')}\n`,
  );
  process.exit(2);
}
const STEP_TIMEOUT_MS = 120_000;
const WHOLE_RUN_MS = quick ? 5 * 60_000 : 20 * 60_000;

const runId = Date.now().toString(36);
let dataDir: string | undefined;

// The last line of defence: whatever hangs, the run ends loudly and cleans up.
const watchdog = setTimeout(() => {
  process.stderr.write(`[bench] FAILED: the whole run took longer than ${WHOLE_RUN_MS / 1000} s\n`);
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  process.exit(1);
}, WHOLE_RUN_MS);
watchdog.unref();

async function main(): Promise<void> {
  const started = performance.now();
  const natsBinary = await ensureNatsServer();
  const machine = describeMachine(natsBinary);
  const code = codeVersion();
  dataDir = await mkdtemp(join(tmpdir(), 'tether-bench-'));
  let nats: EmbeddedNats | undefined;
  const connections: NatsConnection[] = [];
  try {
    nats = await startEmbeddedNats({ dataDir, binary: natsBinary });
    // Tether and the raw baselines each get their own connection, as separate programs would.
    const nc = await connectNats(nats.url, { name: 'tether-bench' });
    const rawNc = await connectNats(nats.url, { name: 'tether-bench-raw' });
    connections.push(nc, rawNc);
    progress(`nats-server ${nats.url} (pid ${nats.pid}), store ${dataDir}${quick ? ', quick mode' : ''}`);

    const ctx: BenchContext = {
      quick,
      nc,
      rawNc,
      natsUrl: nats.url,
      natsPid: nats.pid,
      runId,
      stepTimeoutMs: STEP_TIMEOUT_MS,
      settings: [],
      notes: [
        `Load average at the start: ${loadavg()
          .map((l) => l.toFixed(2))
          .join(', ')}.`,
      ],
      runs: [],
    };
    const rows: Row[] = [];
    const profiles: ProfileSection[] = [];
    for (const step of STEPS.filter((s) => !only || only.includes(s.name))) {
      const result = await step.measure(ctx, forceProfile);
      rows.push(...result.rows);
      profiles.push(...result.profiles);
    }

    const report: Report = {
      machine,
      date: new Date().toISOString(),
      code,
      command: commandLine(),
      durationS: 0,
      settings: [
        `Code under test: ${CODE_KIND}, in the bench's process and in every child process.`,
        ...ctx.settings,
        'Fresh stream and bucket names for every run; one nats-server on a temporary directory, removed afterwards (the failover step (j) and the cluster step (k, l) each start a cluster of three of their own, also removed).',
      ],
      rows,
      runs: ctx.runs,
      notes: [
        ...ctx.notes,
        `The Tether side and the raw baselines run in this one node process (the ws clients and the heap measurement in child processes), on ${machine.cores} cores shared with nats-server.`,
        'Ratios: (a, a1, a2) Tether events/s ÷ raw msgs/s and (a3) ÷ Socket.IO msgs/s, (l) 3 nodes ÷ 1 node events/s, and the recovery rows (f1, f3, f4): higher is better; every other row is Tether ÷ baseline for a time or a size: lower is better. Each step notes its own rows.',
        'nats-server acknowledges before fsync (default sync interval), for both sides alike.',
      ],
      profiles,
    };
    report.durationS = (performance.now() - started) / 1000;
    const where = only ? 'not written to bench/RESULTS.md (--only)' : 'written to bench/RESULTS.md';
    if (!only) await writeFile(RESULTS_FILE, renderMarkdown(report));
    process.stdout.write(
      `\n${tableLines(rows).join('\n')}\n\n${report.command}: ${report.durationS.toFixed(0)} s; ${where}\n`,
    );
    for (const p of profiles) process.stdout.write(`profile: ${p.file}\n`);
  } finally {
    await Promise.allSettled(connections.map((c) => c.close()));
    await nats?.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().then(
  () => {
    clearTimeout(watchdog);
    process.exit(0);
  },
  (err: unknown) => {
    process.stderr.write(`[bench] FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
