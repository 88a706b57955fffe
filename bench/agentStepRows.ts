// Row (i): the host's CPU time per agent step in a 10,000-event conversation
// against a 1,000-event one, in the same process and the same rounds: the
// work Tether does per step must not grow with the log.
import type { BenchContext, Measured } from './benchContext.ts';
import { agentStepFixture, STEPS_PER_ROUND } from './agentStepBench.ts';
import { busyMachine, cpuMeter, fmt, median, noiseNote, progress, repeat, type CpuUse } from './measure.ts';
import type { Row } from './report.ts';

const SHORT = 1_000;
const LONG = 10_000;
const TARGET = 1.5;

interface Round {
  /** CPU ms of this process per agent step: short, long. */
  perStep: [number, number];
  cpu: CpuUse;
  summary: string;
}

export async function measureAgentStep(ctx: BenchContext): Promise<Measured> {
  const reps = ctx.quick ? { warmups: 1, runs: 3 } : { warmups: 1, runs: 7 };
  const rounds = 6;
  progress(`agent step: building conversations of ${fmt.int(SHORT)} and ${fmt.int(LONG)} events`);
  const f = await agentStepFixture(ctx.nc, { short: SHORT, long: LONG }, ctx.runId, ctx.stepTimeoutMs);
  try {
    const ids = [f.conversations.get('short')!, f.conversations.get('long')!] as const;
    const before = await Promise.all(ids.map((id) => f.size(id)));
    /** CPU ms of this process per agent step over `rounds` rounds on one conversation. */
    const side = async (id: string): Promise<number> => {
      const t0 = process.cpuUsage();
      for (let i = 0; i < rounds; i++) await f.round(id);
      const used = process.cpuUsage(t0);
      return (used.user + used.system) / 1000 / (rounds * STEPS_PER_ROUND);
    };
    const { kept, discarded } = await repeat(
      'agent step',
      reps,
      async (i): Promise<Round> => {
        const cpu = cpuMeter(ctx.natsPid);
        const perStep: [number, number] = [0, 0];
        // The order turns every run, so neither side always follows the other's garbage.
        for (const at of i % 2 ? [1, 0] : [0, 1]) perStep[at] = await side(ids[at]!);
        return {
          perStep,
          cpu: cpu(),
          summary: `${fmt.int(SHORT)} events ${perStep[0].toFixed(2)} ms/step; ${fmt.int(LONG)} events ${perStep[1].toFixed(2)} ms/step`,
        };
      },
      (r) => busyMachine(r.cpu),
    );
    const after = await Promise.all(ids.map((id) => f.size(id)));
    const short = median(kept.map((r) => r.perStep[0]));
    const long = median(kept.map((r) => r.perStep[1]));
    ctx.notes.push(
      noiseNote('agent step', kept.length, discarded.length, kept.filter((r) => busyMachine(r.cpu)).length),
    );
    ctx.runs.push(
      `agent step runs (${fmt.int(SHORT)} / ${fmt.int(LONG)} events, CPU ms per step): ${kept.map((r) => r.perStep.map((x) => x.toFixed(2)).join(' / ')).join('; ')}`,
    );
    const sizes = (k: 0 | 1) =>
      `${fmt.int(before[k]!.events)} events (${(before[k]!.bytes / 2 ** 20).toFixed(1)} MiB of event JSON) at the first measured round, ${fmt.int(after[k]!.events)} after the last`;
    ctx.settings.push(
      `Agent step (i): one NodeHost in the bench's process (JetStream event log, KV conversation and snapshot stores, scripted agent, in-memory runtime whose every command prints 16 lines of 64 characters, silent logger, default limits) holding two live conversations written by it one round at a time: a user message \`!cat file-N\`, the agent runs it (step 1), summarises its output (step 2) and waits; about 6 events and 2.6 KiB of event JSON per round. Short: ${sizes(0)}; long: ${sizes(1)}. A run is ${rounds} rounds on each (the order turning every run), timed by \`process.cpuUsage()\` of the bench's process (Tether's host and its NATS client; nats-server apart) around the rounds and divided by the agent steps (${rounds * STEPS_PER_ROUND}); ${reps.warmups} warm-up + ${reps.runs} measured runs, median; busy runs run again as above.`,
    );
    const ratio = long / short;
    if (ratio > TARGET)
      ctx.notes.push(
        `**Agent-step target missed**: a step in the ${fmt.int(LONG)}-event conversation costs ${fmt.ratio(ratio)}× one in the ${fmt.int(SHORT)}-event conversation, against ≤ ${TARGET}.`,
      );
    const row: Row = {
      measurement: `(i) agent step: host CPU time per agent step (scripted agent, a command round: run, then summarise), a ${fmt.int(LONG)}-event conversation vs a ${fmt.int(SHORT)}-event one, live in the same NodeHost (median)`,
      tether: `${long.toFixed(2)} ms/step`,
      baseline: `${short.toFixed(2)} ms/step`,
      ratio,
      target: `≤ ${TARGET}`,
      pass: ratio <= TARGET,
    };
    return { rows: [row], profiles: [] };
  } finally {
    await f.drop();
  }
}
