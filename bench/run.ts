// `npm run bench [-- --quick] [-- --profile]`: starts its own nats-server on a
// temporary store, measures the append and read paths against raw JetStream,
// writes bench/RESULTS.md and prints the table. Exits 1 on any error or
// timeout; a missed target is reported (and profiled), not an error.
import { rmSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ensureNatsServer } from '../scripts/nats-binary.js';
import { connectNats, startEmbeddedNats, type EmbeddedNats, type NatsConnection } from '../src/store/index.ts';
import { rawPublishRun, tetherAppendRun, type AppendPlan } from './appendBench.ts';
import { busyMachine, cpuMeter, fmt, median, progress, repeat, type Repetitions } from './measure.ts';
import { APPEND_BUCKETS, READ_BUCKETS } from './buckets.ts';
import { attribute, inclusiveIn, profiled, saveProfile, summarise, type Bucket, type CpuProfile } from './profile.ts';
import { rawRead, readFixture, tetherRead } from './readBench.ts';
import { codeVersion, commandLine, describeMachine, renderMarkdown, tableLines, type ProfileSection, type Report, type Row } from './report.ts';

const quick = process.argv.includes('--quick');
const forceProfile = process.argv.includes('--profile');
const STEP_TIMEOUT_MS = 120_000;
const WHOLE_RUN_MS = quick ? 5 * 60_000 : 20 * 60_000;
const APPEND_TARGET = 0.5;
const READ_TARGET = 1.5;

const append: AppendPlan & { reps: Repetitions } = quick
  ? { conversations: 100, messagesPerConversation: 5, window: 5, timeoutMs: STEP_TIMEOUT_MS, reps: { warmups: 1, runs: 2 } }
  : { conversations: 100, messagesPerConversation: 40, window: 8, timeoutMs: STEP_TIMEOUT_MS, reps: { warmups: 1, runs: 5 } };
const read = quick ? { events: 10_000, reps: { warmups: 1, runs: 3 } } : { events: 10_000, reps: { warmups: 2, runs: 9 } };

const runId = Date.now().toString(36);
let dataDir: string | undefined;

// The last line of defence: whatever hangs, the run ends loudly and cleans up.
const watchdog = setTimeout(() => {
  process.stderr.write(`[bench] FAILED: the whole run took longer than ${WHOLE_RUN_MS / 1000} s\n`);
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  process.exit(1);
}, WHOLE_RUN_MS);
watchdog.unref();

/** Whether other processes disturbed the measurement, in one line. */
function noiseNote(label: string, kept: number, discarded: number, stillBusy: number): string {
  const redone = discarded ? `${discarded} ${label} run(s) were run again because other processes used over 20% of a core meanwhile` : '';
  if (stillBusy) return `**Noisy machine**: ${redone ? `${redone}, and ` : ''}${stillBusy} of the ${kept} kept ${label} runs still had other processes using over 20% of a core; those figures are less reliable.`;
  return redone ? `${redone}; the ${kept} kept runs had a quiet machine.` : `All ${kept} ${label} runs had a quiet machine (other processes under 20% of a core).`;
}

async function measureAppend(nc: NatsConnection, rawNc: NatsConnection, natsPid: number, runs: string[], notes: string[]): Promise<Row> {
  const { kept: results, discarded } = await repeat(
    'append',
    append.reps,
    async (i) => {
      const tether = await tetherAppendRun(nc, natsPid, append, `${runId}_${i}`);
      const raw = await rawPublishRun(rawNc, natsPid, tether.payloads, `${runId}_${i}`, STEP_TIMEOUT_MS);
      return { tether, raw, ratio: tether.perSecond / raw.perSecond, summary: `Tether ${tether.summary}; raw ${raw.summary}` };
    },
    (r) => busyMachine(r.tether.cpu) || busyMachine(r.raw.cpu),
  );
  notes.push(noiseNote('append', results.length, discarded.length, results.filter((r) => busyMachine(r.tether.cpu) || busyMachine(r.raw.cpu)).length));
  results.forEach((r, i) => runs.push(`append run ${i + 1}: Tether ${r.tether.summary}; raw publish ${r.raw.summary}; ratio ${fmt.ratio(r.ratio)}`));
  const tether = median(results.map((r) => r.tether.perSecond));
  const raw = median(results.map((r) => r.raw.perSecond));
  const ratio = tether / raw;
  const perEvent = (pick: (r: (typeof results)[number]) => number) => fmt.int(median(results.map(pick)) * 1000);
  notes.push(
    `CPU per stored event (median, µs): Tether run ${perEvent((r) => r.tether.cpu.nodeMs / r.tether.events)} in node + ${perEvent((r) => r.tether.cpu.natsMs / r.tether.events)} in nats-server; raw publish ${perEvent((r) => r.raw.cpu.nodeMs / r.raw.events)} in node + ${perEvent((r) => r.raw.cpu.natsMs / r.raw.events)} in nats-server. The Tether figure includes the ws clients.`,
  );
  if (ratio < APPEND_TARGET) {
    const needed = raw * APPEND_TARGET;
    notes.push(
      `**Append target missed** by ${fmt.ratio(APPEND_TARGET - ratio)} (ratio ${fmt.ratio(ratio)} against ≥ ${APPEND_TARGET}): at this baseline Tether needs ${fmt.int(needed)} events/s, ${((needed / tether - 1) * 100).toFixed(0)}% more than it reached. See the append profile below for where the time goes.`,
    );
  }
  return {
    measurement: `(a) append: stored events/s, ${append.conversations} conversations over ws (Tether) vs raw JetStream async publish`,
    tether: `${fmt.int(tether)} events/s`,
    baseline: `${fmt.int(raw)} msgs/s`,
    ratio,
    target: `≥ ${APPEND_TARGET}`,
    pass: ratio >= APPEND_TARGET,
  };
}

async function measureRead(nc: NatsConnection, natsPid: number, runs: string[], notes: string[]): Promise<Row> {
  const fixture = await readFixture(nc, read.events, `${runId}`, STEP_TIMEOUT_MS);
  try {
    const { kept: results, discarded } = await repeat(
      'read',
      read.reps,
      async (i) => {
        const cpu = cpuMeter(natsPid);
        // Alternate who goes first, so neither always reads a cold or a warm server.
        const raw1 = i % 2 === 0 ? undefined : await rawRead(fixture, STEP_TIMEOUT_MS);
        const tether = await tetherRead(fixture, STEP_TIMEOUT_MS);
        const raw = raw1 ?? (await rawRead(fixture, STEP_TIMEOUT_MS));
        return { tether, raw, cpu: cpu(), summary: `Tether log.read ${tether.summary}; raw ordered consumer ${raw.summary}` };
      },
      (r) => busyMachine(r.cpu),
    );
    notes.push(noiseNote('read', results.length, discarded.length, results.filter((r) => busyMachine(r.cpu)).length));
    results.forEach((r, i) => runs.push(`read run ${i + 1}: Tether log.read ${fmt.ms(r.tether.ms)} ms; raw ordered consumer ${fmt.ms(r.raw.ms)} ms`));
    const tether = median(results.map((r) => r.tether.ms));
    const raw = median(results.map((r) => r.raw.ms));
    if (tether / raw > READ_TARGET) {
      notes.push(`**Read target missed**: ratio ${fmt.ratio(tether / raw)} against ≤ ${READ_TARGET}; Tether needs ≤ ${fmt.ms(raw * READ_TARGET)} ms. See the read profile below.`);
    }
    return {
      measurement: `(b) read: ${fmt.int(read.events)} events of one conversation, \`log.read\` vs raw ordered consumer + JSON.parse`,
      tether: `${fmt.ms(tether)} ms`,
      baseline: `${fmt.ms(raw)} ms`,
      ratio: tether / raw,
      target: `≤ ${READ_TARGET}`,
      pass: tether / raw <= READ_TARGET,
    };
  } finally {
    await fixture.drop();
  }
}

async function profileSection(
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
  return { title, note, file, summary: summarise(profile), shares: attribute(profile, buckets), src: [...inclusiveIn(profile, 'src/'), ...inclusiveIn(profile, 'machines/', 5)] };
}

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

    const runs: string[] = [];
    const notes: string[] = [`Load average at the start: ${loadavg().map((l) => l.toFixed(2)).join(', ')}.`];
    const rows = [await measureAppend(nc, rawNc, nats.pid, runs, notes), await measureRead(rawNc, nats.pid, runs, notes)];
    const natsPid = nats.pid;
    const profiles: ProfileSection[] = [];
    if (forceProfile || !rows[0]!.pass) {
      profiles.push(
        await profileSection(
          'Append run',
          `The timed phase of one extra append run (${append.conversations} conversations × ${append.messagesPerConversation} messages) under the CPU profiler (200 µs sampling). It covers this node process only: the Tether server, its NATS client and the ${append.conversations} bench ws clients (area "bench (clients)" and part of "ws"), not nats-server.`,
          APPEND_BUCKETS,
          (around) => tetherAppendRun(nc, natsPid, append, `${runId}_profile`, around),
        ),
      );
    }
    if (forceProfile || !rows[1]!.pass) {
      const fixture = await readFixture(rawNc, read.events, `${runId}_profile`, STEP_TIMEOUT_MS);
      try {
        profiles.push(
          await profileSection('Read', `Five \`log.read\` calls of ${fmt.int(read.events)} events under the CPU profiler.`, READ_BUCKETS, (around) =>
            around(async () => {
              for (let i = 0; i < 5; i++) await tetherRead(fixture, STEP_TIMEOUT_MS);
            }),
          ),
        );
      } finally {
        await fixture.drop();
      }
    }

    const report: Report = {
      machine,
      date: new Date().toISOString(),
      code,
      command: commandLine(),
      durationS: (performance.now() - started) / 1000,
      settings: [
        `Append: ${append.conversations} users with one conversation and one ws client each (default session limits), ${append.messagesPerConversation} user messages per client with at most ${append.window} in flight (a message is in flight until it comes back as a stored \`message\` event); scripted agent, in-memory runtime, JetStream event log, KV conversation and snapshot stores, silent logger; ${append.reps.warmups} warm-up + ${append.reps.runs} measured runs, median; a run during which other processes used over 20% of a core is run again (at most ${append.reps.runs} times).`,
        `Append timing: from the first message sent to the last client having every event its messages caused (all its messages back and the agent out of \`running\` after the last one); conversation creation and start-up are not timed. Every event frame is checked against the REST events list afterwards (same seqs, same order, same JSON, none missing or extra).`,
        `Append baseline: the same stored-event JSON payloads (same count, same bytes) published with \`js.publish\` without awaiting each, then all acks awaited, to ${append.conversations} subjects of a fresh stream with the event stream's settings (\`ensureEventStream\`), on a second NATS connection opened by the same \`connectNats\` (same client options as Tether).`,
        `Read: ${fmt.int(read.events)} stored events of one conversation (plus as many of another conversation in the same stream); \`log.read(id)\` against \`js.consumers.get(stream, { filter_subjects: subject })\` + \`consume({ max_messages: 1000 })\` until nothing is pending, \`JSON.parse\` of each; ${read.reps.warmups} warm-up + ${read.reps.runs} measured runs (order alternating), median, busy runs run again as above.`,
        'Fresh stream and bucket names for every run; one nats-server on a temporary directory, removed afterwards.',
      ],
      rows,
      runs,
      notes: [
        ...notes,
        `Both sides run in this one node process on ${machine.cores} cores, shared with nats-server; the append run also carries the ${append.conversations} ws clients' own work.`,
        'Ratio (a) is Tether events/s ÷ raw msgs/s (higher is better); ratio (b) is Tether ms ÷ raw ms (lower is better).',
        'nats-server acknowledges before fsync (default sync interval), for both sides alike.',
      ],
      profiles,
    };
    report.durationS = (performance.now() - started) / 1000;
    await writeFile(new URL('./RESULTS.md', import.meta.url), renderMarkdown(report));
    process.stdout.write(`\n${tableLines(rows).join('\n')}\n\n${report.command}: ${report.durationS.toFixed(0)} s; written to bench/RESULTS.md\n`);
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
