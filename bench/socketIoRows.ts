// Rows (a2) and (a3), "append and deliver": user actions over ws → stored →
// delivered to every client of the conversation (100 conversations × 3
// clients), against raw JetStream async publish of the same payloads (the
// limit) and against a Socket.IO server with connection state recovery doing
// the same fan-out without storage. Each repetition runs all three back to back.
import { rawPublishRun, tetherAppendRun, type AppendPlan, type AppendRun, type RawPublishRun } from './appendBench.ts';
import type { BenchContext } from './benchContext.ts';
import { APPEND_BUCKETS } from './buckets.ts';
import type { ClientFleet } from './clientFleet.ts';
import { busyMachine, fmt, median, noiseNote, repeat, type Repetitions } from './measure.ts';
import { profileSection } from './profile.ts';
import type { ProfileSection, Row } from './report.ts';
import { socketIoRun, type SocketIoRun } from './socketIoBench.ts';

export const DELIVER_TARGET = 0.5;

export type FanOutPlan = AppendPlan & { reps: Repetitions };

interface Trio {
  tether: AppendRun;
  raw: RawPublishRun;
  socketIo: SocketIoRun;
  summary: string;
}

export interface FanOutResult {
  rows: Row[];
  profiles: ProfileSection[];
  /** Median peak rates, for the latency runs at half of each. */
  tetherPerSecond: number;
  socketIoPerSecond: number;
}

const busy = (r: Trio) => busyMachine(r.tether.cpu) || busyMachine(r.raw.cpu) || busyMachine(r.socketIo.cpu);
const microsEach = (values: number[]) => fmt.int(median(values) * 1000);

/** The largest shares of a profile's busy time (idle left out) and its heaviest function, in one line. */
function largestShares(p: ProfileSection, count = 4): string {
  const busyShares = p.shares.filter((s) => !s.label.startsWith('idle'));
  const total = busyShares.reduce((n, s) => n + s.ms, 0);
  const pct = (ms: number) => `${((ms / total) * 100).toFixed(0)}%`;
  const shares = busyShares.slice(0, count).map((s) => `${s.label}: ${pct(s.ms)}`);
  const heaviest = p.summary.functions.find((f) => !f.where.startsWith('('));
  return `${shares.join('; ')}${heaviest ? `. The heaviest single function by self time is \`${heaviest.where}\` (${pct(heaviest.selfMs)} of the busy time)` : ''}`;
}

export async function measureFanOut(ctx: BenchContext, fleet: ClientFleet, plan: FanOutPlan, forceProfile: boolean, singleClientPerSecond: number): Promise<FanOutResult> {
  const label = 'append and deliver';
  const { kept, discarded } = await repeat(
    label,
    plan.reps,
    async (i) => {
      const tag = `${ctx.runId}_deliver${i}`;
      const tether = await tetherAppendRun(ctx.nc, ctx.natsPid, fleet, plan, tag);
      const raw = await rawPublishRun(ctx.rawNc, ctx.natsPid, tether.payloads, tag, ctx.stepTimeoutMs);
      const socketIo = await socketIoRun(ctx.natsPid, fleet, tether.payloads, { clientsPerRoom: plan.clientsPerConversation, window: plan.window, timeoutMs: plan.timeoutMs }, tag);
      return { tether, raw, socketIo, summary: `Tether ${tether.summary}; raw ${raw.summary}; Socket.IO ${socketIo.summary}` };
    },
    busy,
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter(busy).length));
  kept.forEach((r, i) =>
    ctx.runs.push(
      `${label} run ${i + 1}: Tether ${r.tether.summary}; raw publish ${r.raw.summary}; Socket.IO ${r.socketIo.summary}; ratios ${fmt.ratio(r.tether.perSecond / r.raw.perSecond)} (raw), ${fmt.ratio(r.tether.perSecond / r.socketIo.perSecond)} (Socket.IO)`,
    ),
  );

  const tether = median(kept.map((r) => r.tether.perSecond));
  const raw = median(kept.map((r) => r.raw.perSecond));
  const socketIo = median(kept.map((r) => r.socketIo.perSecond));
  const vsRaw = tether / raw;
  const vsSocketIo = tether / socketIo;
  const clients = plan.clientsPerConversation;
  const serverUs = microsEach(kept.map((r) => r.tether.cpu.nodeMs / r.tether.events));
  const natsUs = microsEach(kept.map((r) => r.tether.cpu.natsMs / r.tether.events));
  const socketIoUs = microsEach(kept.map((r) => r.socketIo.cpu.nodeMs / r.socketIo.messages));
  ctx.notes.push(
    `CPU per message, ${label} (median, µs): Tether's server process ${serverUs} + nats-server ${natsUs}, its clients' process ${microsEach(kept.map((r) => r.tether.cpu.clientsMs / r.tether.events))}; ` +
      `the Socket.IO server's process ${socketIoUs}, its clients' process ${microsEach(kept.map((r) => r.socketIo.cpu.clientsMs / r.socketIo.messages))}; ` +
      `raw publish ${microsEach(kept.map((r) => r.raw.cpu.nodeMs / r.raw.events))} in node + ${microsEach(kept.map((r) => r.raw.cpu.natsMs / r.raw.events))} in nats-server. ` +
      `Each message reached ${clients} clients (Tether ${fmt.int(median(kept.map((r) => (r.tether.frames / r.tether.ms) * 1000)))} frames/s, Socket.IO ${fmt.int(median(kept.map((r) => (r.socketIo.frames / r.socketIo.ms) * 1000)))}, median); ` +
      `(a2) against (a), ${clients} clients against 1: ${fmt.ratio(tether / singleClientPerSecond)}.`,
  );

  const rows: Row[] = [
    {
      measurement: `(a2) append and deliver: user actions over ws → stored → delivered to every client of the conversation, ${plan.conversations} conversations × ${clients} ws clients (1 sends, all ${clients} receive), stored events/s vs raw JetStream async publish of the same payloads`,
      tether: `${fmt.int(tether)} events/s`,
      baseline: `${fmt.int(raw)} msgs/s`,
      ratio: vsRaw,
      target: `≥ ${DELIVER_TARGET}`,
      pass: vsRaw >= DELIVER_TARGET,
    },
    {
      measurement: `(a3) append and deliver as (a2) vs a Socket.IO 4.8 server with connection state recovery doing the same fan-out without storage (${plan.conversations} rooms × ${clients} clients, the same payloads), messages/s`,
      tether: `${fmt.int(tether)} events/s`,
      baseline: `${fmt.int(socketIo)} msgs/s`,
      ratio: vsSocketIo,
      target: '> 1 (ahead of Socket.IO)',
      pass: vsSocketIo > 1,
    },
  ];

  const profiles: ProfileSection[] = [];
  if (forceProfile || vsRaw < DELIVER_TARGET || vsSocketIo <= 1) {
    const profile = await profileSection(
      ctx.runId,
      'Append and deliver run',
      `The timed phase of one extra (a2) run (${plan.conversations} conversations × ${clients} clients, ${plan.messagesPerConversation} user actions each) under the CPU profiler (200 µs sampling). It covers the server's node process only: the Tether server and its NATS client. The clients run in their own process and nats-server in its own; neither is in this profile.`,
      APPEND_BUCKETS,
      (around) => tetherAppendRun(ctx.nc, ctx.natsPid, fleet, plan, `${ctx.runId}_deliverprofile`, around),
    );
    profiles.push(profile);
    const cause = `Where the server's busy time goes (profile "Append and deliver run" below): ${largestShares(profile)}.`;
    if (vsRaw < DELIVER_TARGET) {
      const needed = raw * DELIVER_TARGET;
      ctx.notes.push(
        `**(a2) below 0.5** by ${fmt.ratio(DELIVER_TARGET - vsRaw)} (ratio ${fmt.ratio(vsRaw)} against ≥ ${DELIVER_TARGET}): at this baseline Tether needs ${fmt.int(needed)} events/s, ${((needed / tether - 1) * 100).toFixed(0)}% more than it reached. ${cause}`,
      );
    }
    if (vsSocketIo <= 1) {
      ctx.notes.push(
        `**(a3) behind Socket.IO** by ${((1 - vsSocketIo) * 100).toFixed(0)}% (ratio ${fmt.ratio(vsSocketIo)}; Tether would need ${fmt.int(socketIo)} events/s, ${((socketIo / tether - 1) * 100).toFixed(0)}% more than it reached). ` +
          `Per message the Socket.IO server's process spent ${socketIoUs} µs of CPU, Tether's ${serverUs} µs plus ${natsUs} µs in nats-server (it stores every message and waits for the ack before delivering). ${cause}`,
      );
    }
  }
  return { rows, profiles, tetherPerSecond: tether, socketIoPerSecond: socketIo };
}
