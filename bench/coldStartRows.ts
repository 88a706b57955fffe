// Rows (h), (h2): cold start, create → awaiting_user_input with a local
// runtime, through the manager and through HTTP + ws, against a bare bash.
import { readFileSync } from 'node:fs';
import type { BenchContext, Measured } from './benchContext.ts';
import {
  bareBash,
  closeColdStart,
  coldStartFixture,
  httpColdStart,
  managerColdStart,
  type ColdStart,
  type ColdStartFixture,
} from './coldStartBench.ts';
import { busyMachine, cpuMeter, fmt, median, progress } from './measure.ts';
import { onStack, profileSection, type Bucket } from './profile.ts';
import { orders } from './rehydrateRows.ts';
import type { ProfileSection, Row } from './report.ts';

const TARGET_MS = 100;
const PROFILED_STARTS = 20;

/** What happened between one stored start-up event and the one before it. */
const PHASES: Record<string, string> = {
  conversation_created: 'the create call → `conversation_created` stored',
  'runtime_status:starting': '→ `runtime_status starting` stored',
  'runtime_status:connecting': '→ `runtime_status connecting` stored',
  'runtime_status:setting_up':
    '→ `runtime.start()` (workspace mkdir, bash spawned, its prelude and first answer), then `setting_up` stored',
  'runtime_status:connected': '→ the workspace set-up check, then `connected` stored',
  'agent_state_changed:awaiting_user_input': '→ the `awaiting_user_input` state fact stored',
};

const inFile = (part: string) => (stack: readonly { url: string }[]) => stack.some((f) => f.url.includes(part));
const leaf = (name: string) => (stack: readonly { functionName: string }[]) => stack[0]?.functionName === name;

const COLD_START_BUCKETS: Bucket[] = [
  { label: 'spawning bash (node:child_process, fork/exec)', test: inFile('child_process') },
  { label: 'JetStream appends (src/store/jetStreamEventLog)', test: onStack('append', 'src/store/jetStreamEventLog') },
  {
    label: 'KV puts and gets (conversation record, snapshots)',
    test: (s) => inFile('@nats-io/kv')(s) || inFile('src/store/kv')(s),
  },
  { label: 'xstate and the session machine', test: (s) => inFile('/xstate/')(s) || inFile('/machines/')(s) },
  {
    label: 'nats.js receive path and requests',
    test: (s) => inFile('nats-core')(s) || inFile('@nats-io/jetstream')(s),
  },
  { label: 'local runtime (spawn options, prelude, output capture)', test: inFile('src/runtime/') },
  { label: 'Tether session code, rest', test: inFile('/src/') },
  { label: 'bench harness (subscription, timing)', test: inFile('/bench/') },
  { label: 'garbage collector', test: leaf('(garbage collector)') },
  { label: 'idle (waiting for nats-server and bash)', test: leaf('(idle)') },
];

/**
 * CPU time of this process's children that it has reaped (cutime + cstime in
 * /proc/self/stat): the bashes it spawned, which cpuMeter would otherwise
 * count as "other processes".
 */
function reapedChildrenMs(): number {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[13]) + Number(fields[14])) * 10;
  } catch {
    return 0;
  }
}

/** Nearest-rank percentile. */
function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

const describe = (ms: readonly number[]) => `${fmt.ms(median(ms))} ms (p99 ${fmt.ms(percentile(ms, 99))} ms)`;

interface Samples {
  bash: number[];
  manager: ColdStart[];
  http: ColdStart[];
  busy: number;
}

/** Rounds of one bare bash, one cold start through the manager and one through HTTP, each round in another order. */
async function sample(fx: ColdStartFixture, ctx: BenchContext, warmups: number, rounds: number): Promise<Samples> {
  const out: Samples = { bash: [], manager: [], http: [], busy: 0 };
  const order = orders(3);
  for (let i = 0; i < warmups + rounds; i++) {
    const cpu = cpuMeter(ctx.natsPid);
    const children0 = reapedChildrenMs();
    const round: { bash?: number; manager?: ColdStart; http?: ColdStart } = {};
    for (const side of order[i % order.length]!) {
      if (side === 0) round.bash = (await bareBash(fx)).ms;
      else if (side === 1) round.manager = await managerColdStart(fx);
      else round.http = await httpColdStart(fx);
    }
    // Closed after the round, untimed: every start in a round meets the same number of live runtimes.
    await closeColdStart(fx, round.manager!.conversationId);
    await closeColdStart(fx, round.http!.conversationId);
    const use = cpu();
    const busy = busyMachine({ ...use, restMs: Math.max(0, use.restMs - (reapedChildrenMs() - children0)) });
    if (i < warmups) continue;
    out.bash.push(round.bash!);
    out.manager.push(round.manager!);
    out.http.push(round.http!);
    if (busy) out.busy++;
    if ((i - warmups + 1) % 25 === 0)
      progress(
        `cold start: ${i - warmups + 1}/${rounds} rounds; so far manager ${describe(out.manager.map((s) => s.ms))}, HTTP ${describe(out.http.map((s) => s.ms))}, bare bash ${describe(out.bash)}`,
      );
  }
  return out;
}

/** The median time between consecutive start-up events, in the order they were stored. */
function phases(starts: readonly ColdStart[]): { lines: string[]; slowest: string } {
  const labels = starts[0]!.marks.map(([label]) => label);
  const odd = starts.filter((s) => s.marks.map(([l]) => l).join() !== labels.join()).length;
  const steps = labels.map((label, k) => ({
    label,
    ms: median(
      starts.filter((s) => s.marks[k]?.[0] === label).map((s) => s.marks[k]![1] - (k === 0 ? 0 : s.marks[k - 1]![1])),
    ),
  }));
  const slowest = [...steps].sort((a, b) => b.ms - a.ms)[0]!;
  const lines = steps.map((s) => `${PHASES[s.label] ?? `→ \`${s.label}\` stored`} ${fmt.ms(s.ms)} ms`);
  if (odd)
    lines.push(`(${odd} start(s) stored their events in another order and are left out of the steps they differ in)`);
  return { lines, slowest: `${PHASES[slowest.label] ?? slowest.label} (${fmt.ms(slowest.ms)} ms)` };
}

export async function measureColdStart(ctx: BenchContext, forceProfile: boolean): Promise<Measured> {
  const rounds = ctx.quick ? 50 : 200;
  const warmups = ctx.quick ? 3 : 5;
  progress(
    `cold start: ${warmups} warm-up + ${rounds} rounds of bare bash, manager and HTTP + ws cold starts (local runtimes)`,
  );
  const fx = await coldStartFixture(ctx.nc, ctx.runId, ctx.stepTimeoutMs);
  const profiles: ProfileSection[] = [];
  try {
    const s = await sample(fx, ctx, warmups, rounds);
    const missed = report(ctx, s, rounds);
    if (forceProfile || missed) profiles.push(await profileColdStart(ctx, fx));
    const leftRunning = fx.runtimes.filter((r) => r.alive).length;
    if (leftRunning)
      throw new Error(`${leftRunning} local runtime(s) still alive after their sessions were passivated`);
    ctx.settings.push(settings(fx, warmups, rounds));
    return { rows: rowsOf(s, rounds), profiles };
  } finally {
    await fx.drop();
  }
}

/** The notes and every measured start; true when a target was missed. */
function report(ctx: BenchContext, s: Samples, rounds: number): boolean {
  const managerMs = s.manager.map((x) => x.ms);
  const httpMs = s.http.map((x) => x.ms);
  const split = phases(s.manager);
  ctx.notes.push(
    `Cold start (h) split (median per step over ${s.manager.length} starts, each step from the event stored before it, timed where the manager's feed publishes it): ${split.lines.join('; ')}. \`manager.create()\` resolved at ${fmt.ms(median(s.manager.map((x) => x.createdMs)))} ms. Through HTTP (h2), \`POST /api/conversations\` answered 201 at ${fmt.ms(median(s.http.map((x) => x.createdMs)))} ms.`,
    s.busy
      ? `**Noisy machine**: in ${s.busy} of the ${rounds} cold-start rounds other processes (not counting the bashes the round spawned) used over 20% of a core; those rounds were kept (a p99 needs them all).`
      : `All ${rounds} cold-start rounds had a quiet machine (other processes, not counting the bashes the round spawned, under 20% of a core).`,
  );
  ctx.runs.push(
    `cold start (h), manager, ms: ${managerMs.map(fmt.ms).join(', ')}`,
    `cold start (h2), HTTP + ws, ms: ${httpMs.map(fmt.ms).join(', ')}`,
    `cold start baseline, bare bash, ms: ${s.bash.map(fmt.ms).join(', ')}`,
  );
  const missed = median(managerMs) >= TARGET_MS || median(httpMs) >= TARGET_MS;
  if (missed) {
    ctx.notes.push(
      `**Cold-start target missed**: median ${fmt.ms(median(managerMs))} ms through the manager, ${fmt.ms(median(httpMs))} ms through HTTP, against < ${TARGET_MS} ms. The slowest step: ${split.slowest}; a bare bash answers in ${fmt.ms(median(s.bash))} ms. See the cold-start profile below.`,
    );
  }
  return missed;
}

function rowsOf(s: Samples, rounds: number): Row[] {
  const managerMs = s.manager.map((x) => x.ms);
  const httpMs = s.http.map((x) => x.ms);
  const bash = median(s.bash);
  return [
    {
      measurement: `(h) cold start: \`manager.create()\` → \`awaiting_user_input\` stored, local runtime (a bash per conversation), JetStream log + KV stores, ${rounds} starts, median (p99) vs spawning a bare bash and reading its answer to one \`echo\``,
      tether: describe(managerMs),
      baseline: describe(s.bash),
      ratio: median(managerMs) / bash,
      target: `< ${TARGET_MS} ms median`,
      pass: median(managerMs) < TARGET_MS,
    },
    {
      measurement: `(h2) cold start through the API: \`POST /api/conversations\` → a ws client (same process) receives the stored \`awaiting_user_input\` event, ${rounds} starts, median (p99) vs the same bare bash`,
      tether: describe(httpMs),
      baseline: describe(s.bash),
      ratio: median(httpMs) / bash,
      target: `< ${TARGET_MS} ms median`,
      pass: median(httpMs) < TARGET_MS,
    },
  ];
}

function profileColdStart(ctx: BenchContext, fx: ColdStartFixture): Promise<ProfileSection> {
  return profileSection(
    ctx.runId,
    'Cold start',
    `${PROFILED_STARTS} cold starts through the manager, one after the other, under the CPU profiler (their passivation afterwards is not profiled). The profile holds this node process only (Tether and its NATS client); bash and nats-server run in their own processes, so the time spent waiting for them shows as idle.`,
    COLD_START_BUCKETS,
    async (around) => {
      const started = await around(async () => {
        const ids: string[] = [];
        for (let i = 0; i < PROFILED_STARTS; i++) ids.push((await managerColdStart(fx)).conversationId);
        return ids;
      });
      for (const id of started) await closeColdStart(fx, id);
    },
  );
}

function settings(fx: ColdStartFixture, warmups: number, rounds: number): string {
  return [
    `Cold start (h, h2): one NodeHost wired as \`tether serve\` wires it: JetStream event log and KV conversation and snapshot stores on this run's nats-server (fresh stream and buckets), \`localRuntimeProvider\` with its workspaces under a temporary data dir (removed afterwards; every conversation gets a real bash in its own workspace folder), scripted agent, default limits, silent logger, and a Tether server on a loopback port in front of it.`,
    `(h): the bench picks the new conversation's id (\`newId\`), listens to it through \`manager.feed.listen\` (the log's subscription that ws connections use: an event reaches it through the node's follow of the stream), then calls \`manager.create(user, {})\`; the time runs until the \`awaiting_user_input\` state fact has been published and \`create()\` has resolved (checked: the session is \`awaiting_user_input\` with its runtime \`connected\`). No polling: the listener resolves a promise.`,
    '(h2): `fetch` POST `/api/conversations` with `{}` (201), then a `ws` client in this same process opens `/ws?conversation_id=` (whole history) and the time runs until it receives the stored `awaiting_user_input` event frame.',
    `Baseline: \`spawn('bash', ['--noprofile', '--norc'])\` with piped stdio, write \`echo ready\`, until \`ready\` comes back on stdout: the floor of any local runtime's start. Killed afterwards, untimed.`,
    `${warmups} warm-up + ${rounds} measured rounds; each round runs one bare bash, one (h) and one (h2) start, in another of the six orders each round; after every round both sessions are passivated, untimed (runtime stopped: bash killed; \`session_passivated\`; snapshot), so no runtimes pile up; at the end the bench checks that none of the ${fx.runtimes.length} local runtimes it made is still alive. Median and nearest-rank p99 of the ${rounds} starts (the ${Math.ceil(0.99 * rounds)}th fastest).`,
  ].join(' ');
}
