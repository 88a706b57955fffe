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

async function trioRuns(ctx: BenchContext, fleet: ClientFleet, plan: FanOutPlan, label: string): Promise<Trio[]> {
  const { kept, discarded } = await repeat(
    label,
    plan.reps,
    async (i) => {
      const tag = `${ctx.runId}_deliver${i}`;
      const tether = await tetherAppendRun(ctx.nc, ctx.natsPid, fleet, plan, tag);
      const raw = await rawPublishRun(ctx.rawNc, ctx.natsPid, tether.payloads, tag, ctx.stepTimeoutMs);
      const socketIo = await socketIoRun(
        ctx.natsPid,
        fleet,
        tether.payloads,
        { clientsPerRoom: plan.clientsPerConversation, window: plan.window, timeoutMs: plan.timeoutMs },
        tag,
      );
      return {
        tether,
        raw,
        socketIo,
        summary: `Tether ${tether.summary}; raw ${raw.summary}; Socket.IO ${socketIo.summary}`,
      };
    },
    busy,
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter(busy).length));
  kept.forEach((r, i) =>
    ctx.runs.push(
      `${label} run ${i + 1}: Tether ${r.tether.summary}; raw publish ${r.raw.summary}; Socket.IO ${r.socketIo.summary}; ratios ${fmt.ratio(r.tether.perSecond / r.raw.perSecond)} (raw), ${fmt.ratio(r.tether.perSecond / r.socketIo.perSecond)} (Socket.IO)`,
    ),
  );
  return kept;
}

/** Medians over the kept runs: rates, and CPU per message (µs, formatted). */
interface Figures {
  tether: number;
  raw: number;
  socketIo: number;
  serverUs: string;
  natsUs: string;
  socketIoUs: string;
}

function figuresOf(kept: readonly Trio[]): Figures {
  return {
    tether: median(kept.map((r) => r.tether.perSecond)),
    raw: median(kept.map((r) => r.raw.perSecond)),
    socketIo: median(kept.map((r) => r.socketIo.perSecond)),
    serverUs: microsEach(kept.map((r) => r.tether.cpu.nodeMs / r.tether.events)),
    natsUs: microsEach(kept.map((r) => r.tether.cpu.natsMs / r.tether.events)),
    socketIoUs: microsEach(kept.map((r) => r.socketIo.cpu.nodeMs / r.socketIo.messages)),
  };
}

function cpuNote(kept: readonly Trio[], f: Figures, clients: number, singleClientPerSecond: number): string {
  const frameRate = (pick: (r: Trio) => { frames: number; ms: number }) =>
    fmt.int(median(kept.map((r) => (pick(r).frames / pick(r).ms) * 1000)));
  return (
    `CPU per message, append and deliver (median, µs): Tether's server process ${f.serverUs} + nats-server ${f.natsUs}, its clients' process ${microsEach(kept.map((r) => r.tether.cpu.clientsMs / r.tether.events))}; ` +
    `the Socket.IO server's process ${f.socketIoUs}, its clients' process ${microsEach(kept.map((r) => r.socketIo.cpu.clientsMs / r.socketIo.messages))}; ` +
    `raw publish ${microsEach(kept.map((r) => r.raw.cpu.nodeMs / r.raw.events))} in node + ${microsEach(kept.map((r) => r.raw.cpu.natsMs / r.raw.events))} in nats-server. ` +
    `Each message reached ${clients} clients (Tether ${frameRate((r) => r.tether)} frames/s, Socket.IO ${frameRate((r) => r.socketIo)}, median); ` +
    `(a2) against (a), ${clients} clients against 1: ${fmt.ratio(f.tether / singleClientPerSecond)}.`
  );
}

function rowsOf(plan: FanOutPlan, f: Figures): Row[] {
  const clients = plan.clientsPerConversation;
  return [
    {
      measurement: `(a2) append and deliver: user actions over ws → stored → delivered to every client of the conversation, ${plan.conversations} conversations × ${clients} ws clients (1 sends, all ${clients} receive), stored events/s vs raw JetStream async publish of the same payloads`,
      tether: `${fmt.int(f.tether)} events/s`,
      baseline: `${fmt.int(f.raw)} msgs/s`,
      ratio: f.tether / f.raw,
      target: `≥ ${DELIVER_TARGET}`,
      pass: f.tether / f.raw >= DELIVER_TARGET,
    },
    {
      measurement: `(a3) append and deliver as (a2) vs a Socket.IO 4.8 server with connection state recovery doing the same fan-out without storage (${plan.conversations} rooms × ${clients} clients, the same payloads), messages/s`,
      tether: `${fmt.int(f.tether)} events/s`,
      baseline: `${fmt.int(f.socketIo)} msgs/s`,
      ratio: f.tether / f.socketIo,
      target: '> 1 (ahead of Socket.IO)',
      pass: f.tether / f.socketIo > 1,
    },
  ];
}

/** For each missed target: by how much, and what the profile shows. */
function missNotes(f: Figures, profile: ProfileSection): string[] {
  const cause = `Where the server's busy time goes (profile "${profile.title}" below): ${largestShares(profile)}.`;
  const vsRaw = f.tether / f.raw;
  const vsSocketIo = f.tether / f.socketIo;
  const notes: string[] = [];
  if (vsRaw < DELIVER_TARGET) {
    const needed = f.raw * DELIVER_TARGET;
    notes.push(
      `**(a2) below 0.5** by ${fmt.ratio(DELIVER_TARGET - vsRaw)} (ratio ${fmt.ratio(vsRaw)} against ≥ ${DELIVER_TARGET}): at this baseline Tether needs ${fmt.int(needed)} events/s, ${((needed / f.tether - 1) * 100).toFixed(0)}% more than it reached. ${cause}`,
    );
  }
  if (vsSocketIo <= 1) {
    notes.push(
      `**(a3) behind Socket.IO** by ${((1 - vsSocketIo) * 100).toFixed(0)}% (ratio ${fmt.ratio(vsSocketIo)}; Tether would need ${fmt.int(f.socketIo)} events/s, ${((f.socketIo / f.tether - 1) * 100).toFixed(0)}% more than it reached). ` +
        `Per message the Socket.IO server's process spent ${f.socketIoUs} µs of CPU, Tether's ${f.serverUs} µs plus ${f.natsUs} µs in nats-server (it stores every message and waits for the ack before delivering). ${cause}`,
    );
  }
  return notes;
}

export async function measureFanOut(
  ctx: BenchContext,
  fleet: ClientFleet,
  plan: FanOutPlan,
  forceProfile: boolean,
  singleClientPerSecond: number,
): Promise<FanOutResult> {
  const kept = await trioRuns(ctx, fleet, plan, 'append and deliver');
  const f = figuresOf(kept);
  ctx.notes.push(cpuNote(kept, f, plan.clientsPerConversation, singleClientPerSecond));
  const rows = rowsOf(plan, f);
  const profiles: ProfileSection[] = [];
  if (forceProfile || rows.some((r) => r.pass === false)) {
    const profile = await profileSection(
      ctx.runId,
      'Append and deliver run',
      `The timed phase of one extra (a2) run (${plan.conversations} conversations × ${plan.clientsPerConversation} clients, ${plan.messagesPerConversation} user actions each) under the CPU profiler (200 µs sampling). It covers the server's node process only: the Tether server and its NATS client. The clients run in their own process and nats-server in its own; neither is in this profile.`,
      APPEND_BUCKETS,
      (around) => tetherAppendRun(ctx.nc, ctx.natsPid, fleet, plan, `${ctx.runId}_deliverprofile`, around),
    );
    profiles.push(profile);
    ctx.notes.push(...missNotes(f, profile));
  }
  return { rows, profiles, tetherPerSecond: f.tether, socketIoPerSecond: f.socketIo };
}
