// Rows (a) and (a2): the append path with one ws client per conversation and
// with three (fan-out), each run paired with its raw-publish baseline.
import { rawPublishRun, tetherAppendRun, type AppendPlan, type AppendRun, type RawPublishRun } from './appendBench.ts';
import type { BenchContext, Measured } from './benchContext.ts';
import { APPEND_BUCKETS } from './buckets.ts';
import { ClientFleet } from './clientFleet.ts';
import { busyMachine, fmt, median, noiseNote, repeat, type Repetitions } from './measure.ts';
import { profileSection } from './profile.ts';
import type { ProfileSection, Row } from './report.ts';

const APPEND_TARGET = 0.5;
const FAN_OUT = 3;

type Plan = AppendPlan & { reps: Repetitions };

function plans(ctx: BenchContext): { single: Plan; fanOut: Plan; actions: Plan } {
  const base = ctx.quick
    ? { conversations: 100, messagesPerConversation: 5, window: 5, timeoutMs: ctx.stepTimeoutMs }
    : { conversations: 100, messagesPerConversation: 40, window: 8, timeoutMs: ctx.stepTimeoutMs };
  return {
    single: { ...base, clientsPerConversation: 1, reps: ctx.quick ? { warmups: 1, runs: 2 } : { warmups: 1, runs: 5 } },
    fanOut: { ...base, clientsPerConversation: FAN_OUT, reps: ctx.quick ? { warmups: 0, runs: 1 } : { warmups: 1, runs: 3 } },
    actions: {
      ...base,
      messagesPerConversation: base.messagesPerConversation * 4,
      clientsPerConversation: 1,
      userActionsOnly: true,
      reps: ctx.quick ? { warmups: 1, runs: 2 } : { warmups: 1, runs: 5 },
    },
  };
}

interface Paired {
  tether: AppendRun;
  raw: RawPublishRun;
  ratio: number;
  summary: string;
}

const busy = (r: Paired) => busyMachine(r.tether.cpu) || busyMachine(r.raw.cpu);

async function pairedRuns(ctx: BenchContext, fleet: ClientFleet, plan: Plan, label: string): Promise<Paired[]> {
  const { kept, discarded } = await repeat(
    label,
    plan.reps,
    async (i) => {
      const tag = `${ctx.runId}_${label.replace(/\W+/g, '')}${i}`;
      const tether = await tetherAppendRun(ctx.nc, ctx.natsPid, fleet, plan, tag);
      const raw = await rawPublishRun(ctx.rawNc, ctx.natsPid, tether.payloads, tag, ctx.stepTimeoutMs);
      return { tether, raw, ratio: tether.perSecond / raw.perSecond, summary: `Tether ${tether.summary}; raw ${raw.summary}` };
    },
    busy,
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter(busy).length));
  kept.forEach((r, i) => ctx.runs.push(`${label} run ${i + 1}: Tether ${r.tether.summary}; raw publish ${r.raw.summary}; ratio ${fmt.ratio(r.ratio)}`));
  return kept;
}

/** Median CPU per stored event, in µs, for the notes. */
function cpuNote(label: string, results: readonly Paired[]): string {
  const perEvent = (pick: (r: Paired) => number) => fmt.int(median(results.map(pick)) * 1000);
  return (
    `CPU per stored event, ${label} (median, µs): the Tether server's process ${perEvent((r) => r.tether.cpu.nodeMs / r.tether.events)}, ` +
    `nats-server ${perEvent((r) => r.tether.cpu.natsMs / r.tether.events)}, the ws clients' process ${perEvent((r) => r.tether.cpu.clientsMs / r.tether.events)}; ` +
    `raw publish ${perEvent((r) => r.raw.cpu.nodeMs / r.raw.events)} in node + ${perEvent((r) => r.raw.cpu.natsMs / r.raw.events)} in nats-server.`
  );
}

export async function measureAppend(ctx: BenchContext, forceProfile: boolean): Promise<Measured> {
  const { single, fanOut, actions } = plans(ctx);
  const fleet = ClientFleet.start();
  try {
    // (a) as the issue defines it: user actions over ws → stored → delivered back.
    const userRuns = await pairedRuns(ctx, fleet, actions, 'user actions');
    const userTether = median(userRuns.map((r) => r.tether.perSecond));
    const userRaw = median(userRuns.map((r) => r.raw.perSecond));
    const userRatio = userTether / userRaw;
    ctx.notes.push(cpuNote('user actions', userRuns));
    const rows: Row[] = [
      {
        measurement: `(a) append: user actions over ws → stored → delivered back, ${actions.conversations} conversations (clients in their own process), stored events/s vs raw JetStream async publish of the same payloads`,
        tether: `${fmt.int(userTether)} events/s`,
        baseline: `${fmt.int(userRaw)} msgs/s`,
        ratio: userRatio,
        target: `≥ ${APPEND_TARGET}`,
        pass: userRatio >= APPEND_TARGET,
      },
    ];

    const results = await pairedRuns(ctx, fleet, single, 'append');
    const tether = median(results.map((r) => r.tether.perSecond));
    const raw = median(results.map((r) => r.raw.perSecond));
    const ratio = tether / raw;
    ctx.notes.push(cpuNote('append', results));
    if (ratio < APPEND_TARGET) {
      const needed = raw * APPEND_TARGET;
      ctx.notes.push(
        `**Whole turns (a1) below 0.5** (not the target's definition, but what a conversation costs) by ${fmt.ratio(APPEND_TARGET - ratio)} (ratio ${fmt.ratio(ratio)} against ≥ ${APPEND_TARGET}): at this baseline Tether needs ${fmt.int(needed)} events/s, ${((needed / tether - 1) * 100).toFixed(0)}% more than it reached. See the append profile below for where the time goes.`,
      );
    }
    rows.push({
      measurement: `(a1) whole conversation turns: each user message and everything it causes (state facts, the scripted agent's step and reply), ${single.conversations} conversations, stored events/s vs raw JetStream async publish`,
      tether: `${fmt.int(tether)} events/s`,
      baseline: `${fmt.int(raw)} msgs/s`,
      ratio,
      target: '— (no target; the same 0.5 is not met, see notes)',
    });

    const fan = await pairedRuns(ctx, fleet, fanOut, 'fan-out');
    const fanTether = median(fan.map((r) => r.tether.perSecond));
    const fanRaw = median(fan.map((r) => r.raw.perSecond));
    ctx.notes.push(
      `${cpuNote('fan-out', fan)} Each stored event went out in ${FAN_OUT} frames (${fmt.int(median(fan.map((r) => (r.tether.frames / r.tether.ms) * 1000)))} frames/s, median); (a2) against (a): ${fmt.ratio(fanTether / tether)}.`,
    );
    rows.push({
      measurement: `(a2) append with ${FAN_OUT} ws clients per conversation (1 sends, ${FAN_OUT - 1} watch): stored events/s vs raw JetStream async publish`,
      tether: `${fmt.int(fanTether)} events/s`,
      baseline: `${fmt.int(fanRaw)} msgs/s`,
      ratio: fanTether / fanRaw,
      target: '— (no target)',
    });

    const profiles: ProfileSection[] = [];
    if (forceProfile || ratio < APPEND_TARGET || userRatio < APPEND_TARGET) {
      profiles.push(
        await profileSection(
          ctx.runId,
          'Append run',
          `The timed phase of one extra append run (${single.conversations} conversations × ${single.messagesPerConversation} messages) under the CPU profiler (200 µs sampling). It covers the server's node process only: the Tether server and its NATS client. The ws clients run in their own process and nats-server in its own; neither is in this profile.`,
          APPEND_BUCKETS,
          (around) => tetherAppendRun(ctx.nc, ctx.natsPid, fleet, single, `${ctx.runId}_profile`, around),
        ),
      );
    }
    ctx.settings.push(...settings(single, fanOut));
    return { rows, profiles };
  } finally {
    fleet.stop();
  }
}

function settings(single: Plan, fanOut: Plan): string[] {
  const reps = (p: Plan) => `${p.reps.warmups} warm-up + ${p.reps.runs} measured runs, median`;
  return [
    `Append (a), user actions: as (a1) below, but the scripted agent thinks for 10 minutes after the first message, so each further user message is stored and delivered back as exactly one event and nothing else is produced (the session is \`running\`, a message there is accepted and stored as unread); ${single.messagesPerConversation * 4} messages per client with at most ${single.window} in flight; a client is done when all its messages are back as event frames. Frames are checked against REST as below.`,
    `Append (a1), whole turns: ${single.conversations} users with one conversation and one ws client each (default session limits), ${single.messagesPerConversation} user messages per client with at most ${single.window} in flight (a message is in flight until it comes back as a stored \`message\` event); scripted agent, in-memory runtime, JetStream event log, KV conversation and snapshot stores, silent logger; ${reps(single)}; a run during which other processes used over 20% of a core is run again (at most ${single.reps.runs} times).`,
    'Append clients: every ws client runs in one separate node process (`bench/clientProcess.ts`, started once per bench with `node --import tsx`), as real clients are other programs; the bench drives it over IPC. The server\'s process runs only the Tether server (HTTP, ws, sessions, its NATS client). CPU is counted per process: the server\'s, nats-server\'s and the clients\' (from /proc).',
    'Append timing: from the first message sent to the last client having every event its messages caused (all its messages back and the agent out of `running` after the last one), as the client process measures it; conversation creation and start-up are not timed. Afterwards every client\'s event frames (seq and event JSON, shipped back over IPC) are checked against the REST events list (same seqs, same order, same JSON, none missing or extra).',
    `Append (a2), fan-out: as (a) with ${fanOut.clientsPerConversation} ws clients per conversation on the same cursor: the first sends the messages, the others only receive; a run ends when every watcher also has the sender's last event. Every client's frames are checked as above. ${reps(fanOut)}.`,
    `Append baseline: the same stored-event JSON payloads (same count, same bytes) published with \`js.publish\` without awaiting each, then all acks awaited, to ${single.conversations} subjects of a fresh stream with the event stream's settings (\`ensureEventStream\`), on a second NATS connection opened by the same \`connectNats\` (same client options as Tether). No ws clients on that side.`,
  ];
}
