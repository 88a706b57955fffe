// Rows (a4) and (a5): latency of append and deliver at half the peak rate.
// Each side runs at half of its own peak from (a2)/(a3), open loop from the
// client process, and each message's latency runs from when it was due to be
// sent to when the last of its conversation's clients has it.
import { tetherAppendRun, type AppendRun } from './appendBench.ts';
import type { BenchContext } from './benchContext.ts';
import type { ClientFleet } from './clientFleet.ts';
import { summariseLatency, type LatencySummary } from './latencyStats.ts';
import { busyMachine, fmt, median, noiseNote, repeat } from './measure.ts';
import type { Row } from './report.ts';
import type { FanOutPlan } from './socketIoRows.ts';
import { socketIoRun, type SocketIoRun } from './socketIoBench.ts';

interface Pair {
  tether: AppendRun;
  socketIo: SocketIoRun;
  tetherLatency: LatencySummary;
  socketIoLatency: LatencySummary;
  summary: string;
}

const busy = (r: Pair) => busyMachine(r.tether.cpu) || busyMachine(r.socketIo.cpu);

function describe(l: LatencySummary): string {
  return `p50 ${fmt.ms(l.p50)} ms, p99 ${fmt.ms(l.p99)} ms, max ${fmt.ms(l.max)} ms, sender behind schedule p99 ${fmt.ms(l.sendLagP99)} ms`;
}

function latencyOf(run: { paced?: { latencies: Float64Array; sendLags: Float64Array } }): LatencySummary {
  if (!run.paced) throw new Error('a paced run came back without latencies');
  return summariseLatency(run.paced.latencies, run.paced.sendLags);
}

export async function measureLatency(
  ctx: BenchContext,
  fleet: ClientFleet,
  plan: FanOutPlan,
  tetherPeak: number,
  socketIoPeak: number,
): Promise<Row[]> {
  const label = 'latency at half peak';
  const tetherRate = tetherPeak / 2;
  const socketIoRate = socketIoPeak / 2;
  const { kept, discarded } = await repeat(
    label,
    plan.reps,
    async (i) => {
      const tag = `${ctx.runId}_latency${i}`;
      const tether = await tetherAppendRun(ctx.nc, ctx.natsPid, fleet, { ...plan, pacedPerSecond: tetherRate }, tag);
      // The same stored events as payloads, as in (a3).
      const socketIo = await socketIoRun(
        ctx.natsPid,
        fleet,
        tether.payloads,
        {
          clientsPerRoom: plan.clientsPerConversation,
          window: plan.window,
          pacedPerSecond: socketIoRate,
          timeoutMs: plan.timeoutMs,
        },
        tag,
      );
      const tetherLatency = latencyOf(tether);
      const socketIoLatency = latencyOf(socketIo);
      return {
        tether,
        socketIo,
        tetherLatency,
        socketIoLatency,
        summary: `Tether at ${fmt.int(tetherRate)} messages/s: ${describe(tetherLatency)}; Socket.IO at ${fmt.int(socketIoRate)} messages/s: ${describe(socketIoLatency)}`,
      };
    },
    busy,
  );
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter(busy).length));
  kept.forEach((r, i) =>
    ctx.runs.push(
      `${label} run ${i + 1}: Tether ${r.tether.summary}, ${describe(r.tetherLatency)}; Socket.IO ${r.socketIo.summary}, ${describe(r.socketIoLatency)}`,
    ),
  );

  const pick = (side: (r: Pair) => LatencySummary, key: keyof LatencySummary) => median(kept.map((r) => side(r)[key]));
  const tetherSide = (r: Pair) => r.tetherLatency;
  const socketIoSide = (r: Pair) => r.socketIoLatency;
  ctx.notes.push(
    `Latency runs (median of ${kept.length}): the senders kept to their schedule within ${fmt.ms(pick(tetherSide, 'sendLagP99'))} ms (Tether) and ${fmt.ms(pick(socketIoSide, 'sendLagP99'))} ms (Socket.IO) at p99, lateness that counts in the latencies; the slowest message took ${fmt.ms(pick(tetherSide, 'max'))} ms (Tether) and ${fmt.ms(pick(socketIoSide, 'max'))} ms (Socket.IO).`,
  );
  const where = `${plan.conversations} conversations × ${plan.clientsPerConversation} clients, ${plan.messagesPerConversation} user actions per conversation, each side open loop at half its own peak from (a2)/(a3)`;
  const rate = (perSecond: number) => `at ${fmt.int(perSecond)} msgs/s`;
  return (['p50', 'p99'] as const).map((key, n) => {
    const t = pick(tetherSide, key);
    const s = pick(socketIoSide, key);
    return {
      measurement: `(a${4 + n}) append and deliver latency ${key}: from when a user action is due to be sent to when the last client of its conversation has it, ${where}; Tether vs Socket.IO`,
      tether: `${fmt.ms(t)} ms ${rate(tetherRate)}`,
      baseline: `${fmt.ms(s)} ms ${rate(socketIoRate)}`,
      ratio: t / s,
      target: '— (no target)',
    };
  });
}
