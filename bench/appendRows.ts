// The append step: rows (a) and (a1), the append path with one ws client per
// conversation, each run paired with its raw-publish baseline; then append
// and deliver with three clients per conversation against raw JetStream and
// Socket.IO (a2, a3, socketIoRows.ts) and its latency at half the peak rate
// (a4, a5, latencyRows.ts).
import { rawPublishRun, tetherAppendRun, type AppendPlan, type AppendRun, type RawPublishRun } from './appendBench.ts';
import type { BenchContext, Measured } from './benchContext.ts';
import { NODE_FLAGS } from './benchFiles.ts';
import { APPEND_BUCKETS } from './buckets.ts';
import { ClientFleet } from './clientFleet.ts';
import { measureLatency } from './latencyRows.ts';
import { busyMachine, fmt, median, noiseNote, repeat, type Repetitions } from './measure.ts';
import { profileSection } from './profile.ts';
import type { ProfileSection, Row } from './report.ts';
import { measureFanOut, type FanOutPlan } from './socketIoRows.ts';

const APPEND_TARGET = 0.5;
const FAN_OUT = 3;

type Plan = AppendPlan & { reps: Repetitions };

function plans(ctx: BenchContext): { single: Plan; fanOut: FanOutPlan; latency: FanOutPlan; actions: Plan } {
  const base = ctx.quick
    ? { conversations: 100, messagesPerConversation: 5, window: 5, timeoutMs: ctx.stepTimeoutMs }
    : { conversations: 100, messagesPerConversation: 40, window: 8, timeoutMs: ctx.stepTimeoutMs };
  const userActions = { ...base, messagesPerConversation: base.messagesPerConversation * 4, userActionsOnly: true };
  const fanOut = { ...userActions, clientsPerConversation: FAN_OUT };
  return {
    single: { ...base, clientsPerConversation: 1, reps: ctx.quick ? { warmups: 1, runs: 2 } : { warmups: 1, runs: 5 } },
    // (a) runs first in the whole bench, on cold code: V8 compiles the server's hot paths over the first
    // runs (CPU per stored event fell from about 65 to 41 µs over four runs in a row), so three warm-ups.
    actions: {
      ...userActions,
      clientsPerConversation: 1,
      reps: ctx.quick ? { warmups: 1, runs: 2 } : { warmups: 3, runs: 5 },
    },
    // The warm-up also warms the Socket.IO server and clients, which nothing before them runs.
    fanOut: { ...fanOut, reps: ctx.quick ? { warmups: 1, runs: 1 } : { warmups: 1, runs: 3 } },
    latency: { ...fanOut, reps: ctx.quick ? { warmups: 0, runs: 1 } : { warmups: 0, runs: 3 } },
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
      return {
        tether,
        raw,
        ratio: tether.perSecond / raw.perSecond,
        summary: `Tether ${tether.summary}; raw ${raw.summary}`,
      };
    },
    busy,
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter(busy).length));
  kept.forEach((r, i) =>
    ctx.runs.push(
      `${label} run ${i + 1}: Tether ${r.tether.summary}; raw publish ${r.raw.summary}; ratio ${fmt.ratio(r.ratio)}`,
    ),
  );
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
  const { single, fanOut, latency, actions } = plans(ctx);
  const fleet = ClientFleet.start();
  try {
    // (a) as the issue defines it: user actions over ws → stored → delivered back.
    const userRuns = await pairedRuns(ctx, fleet, actions, 'user actions');
    const userTether = median(userRuns.map((r) => r.tether.perSecond));
    const userRaw = median(userRuns.map((r) => r.raw.perSecond));
    const userRatio = userTether / userRaw;
    ctx.notes.push(cpuNote('user actions', userRuns));
    if (userRatio < APPEND_TARGET) {
      const needed = userRaw * APPEND_TARGET;
      ctx.notes.push(
        `**(a) below 0.5** by ${fmt.ratio(APPEND_TARGET - userRatio)} (ratio ${fmt.ratio(userRatio)} against ≥ ${APPEND_TARGET}): at this baseline Tether needs ${fmt.int(needed)} events/s, ${((needed / userTether - 1) * 100).toFixed(0)}% more than it reached. Each conversation's appends wait for the previous acknowledgement (the expected-last-subject-sequence check that keeps a single writer needs the previous event's stream sequence), so a stored event costs one publish, one ack and one ws write of its own, where the raw baseline publishes without waiting and nats.js writes many publishes at once. The "Append run" profile below (this row's plan) shows where the server's time goes.`,
      );
    }
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

    const deliver = await measureFanOut(ctx, fleet, fanOut, forceProfile, userTether);
    rows.push(...deliver.rows);
    rows.push(...(await measureLatency(ctx, fleet, latency, deliver.tetherPerSecond, deliver.socketIoPerSecond)));

    const profiles: ProfileSection[] = [];
    if (forceProfile || ratio < APPEND_TARGET || userRatio < APPEND_TARGET) {
      // The row with the target, (a), when it missed; else whole turns (a1).
      const [plan, kind] =
        forceProfile || userRatio < APPEND_TARGET ? [actions, 'user actions (a)'] : [single, 'whole turns (a1)'];
      profiles.push(
        await profileSection(
          ctx.runId,
          'Append run',
          `The timed phase of one extra append run, ${kind}: ${plan.conversations} conversations × ${plan.messagesPerConversation} messages, under the CPU profiler (200 µs sampling). It covers the server's node process only: the Tether server and its NATS client. The ws clients run in their own process and nats-server in its own; neither is in this profile.`,
          APPEND_BUCKETS,
          (around) => tetherAppendRun(ctx.nc, ctx.natsPid, fleet, plan, `${ctx.runId}_profile`, around),
        ),
      );
    }
    profiles.push(...deliver.profiles);
    ctx.settings.push(...settings(single, actions, fanOut, latency));
    ctx.notes.push(
      'Ratios of (a3): Tether events/s ÷ Socket.IO msgs/s (higher is better); (a4, a5): Tether ms ÷ Socket.IO ms, each at half its own peak rate (lower is better).',
    );
    return { rows, profiles };
  } finally {
    fleet.stop();
  }
}

function settings(single: Plan, actions: Plan, fanOut: FanOutPlan, latency: FanOutPlan): string[] {
  const reps = (p: { reps: Repetitions }) => `${p.reps.warmups} warm-up + ${p.reps.runs} measured runs, median`;
  return [
    `Append (a), user actions: as (a1) below, but the scripted agent thinks for 10 minutes after the first message, so each further user message is stored and delivered back as exactly one event and nothing else is produced (the session is \`running\`, a message there is accepted and stored as unread); ${actions.messagesPerConversation} messages per client with at most ${actions.window} in flight; a client is done when all its messages are back as event frames. Frames are checked against REST as below. ${reps(actions)}.`,
    `Append (a1), whole turns: ${single.conversations} users with one conversation and one ws client each (default session limits), ${single.messagesPerConversation} user messages per client with at most ${single.window} in flight (a message is in flight until it comes back as a stored \`message\` event); scripted agent, in-memory runtime, JetStream event log, KV conversation and snapshot stores, silent logger; ${reps(single)}; a run during which other processes used over 20% of a core is run again (at most ${single.reps.runs} times; the same for every row).`,
    `Append clients: every client (Tether's ws clients and the Socket.IO baseline's) runs in one separate node process (\`bench/clientProcess\`, started once per bench with \`node ${NODE_FLAGS.join(' ')}\`), as real clients are other programs; the bench drives it over IPC. The server's process runs only the server under test (Tether: HTTP, ws, sessions, its NATS client; or the Socket.IO server). CPU is counted per process: the server's, nats-server's and the clients' (from /proc).`,
    "Append timing: from the first message sent to the last client having every event its messages caused (for (a1): all its messages back and the agent out of `running` after the last one), as the client process measures it; conversation creation, start-up and connecting are not timed. Every client checks that each user message it receives is its conversation's next one (by content). Afterwards every client's event frames (seq and event JSON, shipped back over IPC) are checked against the REST events list (same seqs, same order, same JSON, none missing or extra). A run that fails a check fails the bench.",
    `Append and deliver (a2): as (a), with ${fanOut.clientsPerConversation} ws clients per conversation on the same cursor: the first sends ${fanOut.messagesPerConversation} user actions with at most ${fanOut.window} in flight, all ${fanOut.clientsPerConversation} receive every stored event (the sender its own back); a run ends when every client has the sender's last event. Each repetition runs Tether, raw publish (the same payloads) and Socket.IO (a3, the same payloads) back to back; ${reps(fanOut)}.`,
    `Socket.IO baseline (a3): a socket.io 4.8 server on node's http in the bench's process, \`connectionStateRecovery\` on (\`maxDisconnectionDuration\` 2 min: its in-memory adapter keeps every broadcast with an offset for replay), WebSocket transport only, no compression; one room per conversation, joined on connect; \`socket.on('event', (p) => io.to(room).emit('event', p))\`, so the room's every client gets each message, the sender included; no storage, no acks. Its clients: socket.io-client 4.8 in the client process, one WebSocket each (\`forceNew\`), ${fanOut.clientsPerConversation} per room; the first emits the room's payloads, the stored events of the Tether run just before (same count, same JSON, emitted as the parsed objects an application would emit), at most ${fanOut.window} not yet back to it; a run ends when every client has every payload. Afterwards every client's messages are compared with the payloads (same count, order and JSON).`,
    `Latency (a4, a5): each side's peak is its median rate in (a2)/(a3); then a fresh run of each side paced at half its own peak: open loop from the client process, message k of conversation c due at (k × ${latency.conversations} + c) / rate and sent when due whatever has come back (timers, ~1 ms steps); each message's latency is from when it was due to when the last of its conversation's ${latency.clientsPerConversation} clients has it, with one clock (performance.now() in the client process, which sends and receives). Tether sends ${latency.messagesPerConversation} user actions per conversation (the one state fact the first one causes is delivered but not timed); Socket.IO sends that run's ${latency.messagesPerConversation + 1} stored events per room. p50 and p99 by nearest rank over every message of a run; ${reps(latency)}. Checked as in (a2) and (a3).`,
    `Append baseline (a, a1, a2): the same stored-event JSON payloads (same count, same bytes) published with \`js.publish\` without awaiting each, then all acks awaited, to ${single.conversations} subjects of a fresh stream with the event stream's settings (\`ensureEventStream\`), on a second NATS connection opened by the same \`connectNats\` (same client options as Tether). No ws clients on that side.`,
  ];
}
