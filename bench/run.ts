// `npm run bench [-- --quick] [-- --profile] [-- --only=name,...]`: starts its
// own nats-server on a temporary store, runs every scenario of
// bench/scenarios/ in order (each with its baseline in the same run), writes
// bench/RESULTS.md whole and prints the summary table; `--only` and `--quick`
// print it and write nothing. Exits 1 on any error or timeout; a missed target
// is reported, not an error. bench/README.md: the method.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ensureNatsServer } from '../scripts/nats-binary.js';
import { connectNats, startEmbeddedNats } from '../src/store/index.ts';
import { progress, track, within } from './harness/measure.ts';
import { summariseProfiles } from './harness/profile.ts';
import { REPO_ROOT } from './harness/proc.ts';
import { codeVersion, render, table, type Measured } from './harness/results.ts';
import type { Ctx } from './harness/scenario.ts';
import { SCENARIOS } from './scenarios/index.ts';

const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const only = argv
  .find((a) => a.startsWith('--only='))
  ?.slice(7)
  .split(',');
const unknown = only?.filter((n) => !SCENARIOS.some((s) => s.name === n)) ?? [];
if (unknown.length) {
  progress(`unknown scenario(s) ${unknown.join(', ')}; they are ${SCENARIOS.map((s) => s.name).join(', ')}`);
  process.exit(2);
}
const SCENARIO_TIMEOUT_MS = (quick ? 2 : 6) * 60_000;
// history builds 20,000 conversations (about 3 minutes); while the per-user cap reads the user's whole index,
// each of its (p2) runs takes minutes more.
const FULL_TIMEOUT_MS: Readonly<Record<string, number>> = { history: 30 * 60_000 };
const WHOLE_RUN_MS = (quick ? 5 : 45) * 60_000;
const command =
  process.env.npm_lifecycle_event === 'bench'
    ? `npm run bench${argv.length ? ` -- ${argv.join(' ')}` : ''}`
    : `tsx bench/run.ts ${argv.join(' ')}`.trim();
const runId = Date.now().toString(36);
let dataDir = '';

const watchdog = setTimeout(() => {
  progress(`FAILED: the whole run took longer than ${WHOLE_RUN_MS / 1000} s`);
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  process.exit(1);
}, WHOLE_RUN_MS);

async function main(): Promise<void> {
  const t0 = performance.now();
  const binary = await ensureNatsServer();
  dataDir = await mkdtemp(join(tmpdir(), 'tether-bench-'));
  const nats = await startEmbeddedNats({ dataDir: join(dataDir, 'nats'), binary });
  track('nats-server', nats.pid);
  const nc = await connectNats(nats.url, { name: 'tether-bench' });
  // Kept after the run: the summaries in RESULTS.md name them.
  const profileDir = join(tmpdir(), `tether-bench-profiles-${runId}`);
  const measured: Measured[] = [];
  const profiles: string[] = [];
  try {
    for (const scenario of SCENARIOS.filter((s) => !only || only.includes(s.name))) {
      const log: string[] = [];
      const notes: string[] = [];
      const ctx: Ctx = {
        quick,
        profile: argv.includes('--profile'),
        natsUrl: nats.url,
        nc,
        tag: (label) => `${runId}_${scenario.name}_${label}`.replace(/\W/g, '_'),
        profileDir: join(profileDir, scenario.name),
        log: (l) => log.push(l),
        note: (n) => notes.push(n),
      };
      // Only a profiled run writes profiles: no empty folder is left behind otherwise.
      if (ctx.profile) mkdirSync(ctx.profileDir, { recursive: true });
      progress(`${scenario.name}: ${scenario.load}`);
      const s0 = performance.now();
      const bound = quick ? SCENARIO_TIMEOUT_MS : (FULL_TIMEOUT_MS[scenario.name] ?? SCENARIO_TIMEOUT_MS);
      const got = await within(bound, `scenario ${scenario.name}`, scenario.run(ctx));
      const seconds = (performance.now() - s0) / 1000;
      progress(`${scenario.name}: ${seconds.toFixed(0)} s`);
      measured.push({ scenario, rows: got, log, notes, seconds });
      if (ctx.profile) profiles.push(...summariseProfiles(scenario.name, ctx.profileDir));
    }
    const natsServer = execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim();
    const report = {
      command,
      seconds: (performance.now() - t0) / 1000,
      natsServer,
      code: codeVersion(),
      measured,
      profiles,
    };
    // Only a whole, full run writes RESULTS.md.
    if (!only && !quick) writeFileSync(join(REPO_ROOT, 'bench', 'RESULTS.md'), render(report));
    const where = only || quick ? 'RESULTS.md not written (--only, --quick)' : 'written to bench/RESULTS.md';
    process.stdout.write(
      `\n${table(measured.flatMap((m) => m.rows)).join('\n')}\n\n${command}: ${report.seconds.toFixed(0)} s; ${where}\n`,
    );
  } finally {
    await nc.close().catch(() => undefined);
    await nats.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().then(
  () => {
    clearTimeout(watchdog);
    process.exit(0);
  },
  (err: unknown) => {
    progress(`FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exit(1);
  },
);
