// (a2, a3) Append and deliver to every client of a conversation, against raw
// JetStream publish and a Socket.IO server doing the same fan-out without
// storage; (a4, a5) the latency of each at half its own peak, open loop.
import { connectRooms, SocketIoServer, SOCKET_IO_MODULE } from '../baselines/socketIo.ts';
import { close, frames, paced, run, Fleet, type Paced } from '../harness/fleet.ts';
import { TetherHost } from '../harness/host.ts';
import { fmt, median, percentile, timed } from '../harness/measure.ts';
import { msFigure, per, repeat, reps, type Ctx, type Row, type Scenario } from '../harness/scenario.ts';
import { appendRun, pairedWithRaw, type AppendPlan } from './append.ts';

const CLIENTS = 3;
let rooms = 0;

/** The same payloads through Socket.IO: one room per conversation, its sender emits, every member gets each back. */
async function socketIoRun(io: SocketIoServer, fleet: Fleet, payloads: string[][], window: number, perSecond?: number) {
  const list = payloads.map((p) => ({ room: `room${rooms++}`, payloads: p }));
  await fleet.call(SOCKET_IO_MODULE, connectRooms, [io.url, list, CLIENTS]);
  const each = payloads[0]!.length;
  const t = await timed(async (): Promise<{ ms: number; paced?: Paced }> => {
    if (perSecond === undefined) return { ms: await fleet.do(run, each, window, false) };
    const p = await fleet.do(paced, each, perSecond);
    return { ms: p.ms, paced: p };
  });
  const got = await fleet.do(frames);
  await fleet.do(close);
  got.forEach((f, i) => {
    const sent = payloads[Math.floor(i / CLIENTS)]!;
    if (f.length !== sent.length || f.some(([, json], k) => json !== sent[k]))
      throw new Error(`Socket.IO client ${i}: its messages differ from what was sent (lost, repeated or out of order)`);
  });
  const messages = payloads.reduce((n, p) => n + p.length, 0);
  return { perSecond: (messages / t.value.ms) * 1000, paced: t.value.paced, use: t };
}

const latencyOf = (p: Paced | undefined, q: number) => percentile(p!.latencies, q);

export const fanOut: Scenario = {
  name: 'fanout',
  setup: `as (a), with ${CLIENTS} ws clients per conversation on the same cursor; a Socket.IO server in a process of its own (bench/baselines/socketIo.ts) and its clients in the fleet, one room per conversation, ${CLIENTS} clients each.`,
  load: `(a2, a3) the first client of each of 100 conversations sends 160 user actions (a first message, sent and stored before anything is timed, set the agent thinking, so each timed one is one event), at most 8 in flight; all ${CLIENTS} receive every event; a run ends when every client has the sender's last event. Each repetition runs Tether, raw publish and Socket.IO (the same stored payloads, emitted as parsed objects) back to back; 1 warm-up and 3 runs, median. (a4, a5) then a fresh run of each side paced at half its own median peak: message k of conversation c due at (k × 100 + c) / rate and sent when due whatever came back; latency from due to the last client of its conversation having it; p50 and p99 by nearest rank over every message; 3 runs, median.`,
  baseline:
    '(a2) raw JetStream async publish of the same payloads, as in (a); (a3, a4, a5) socket.io 4.8 with connection state recovery, WebSocket only, `io.to(room).emit` of each message (the sender gets its own back), no storage, no acks.',
  checks:
    'Tether frames against the REST log as in (a); every Socket.IO client got every payload of its room once, in order, with the same JSON.',
  quick:
    '50 conversations, 20 user actions each, 5 in flight, one warm-up and one run; then one paced run per side of 60 user actions per conversation.',
  async run(ctx: Ctx) {
    const fleet = new Fleet();
    const host = await TetherHost.start(ctx, { tag: ctx.tag('fanout'), agent: 'thinking' });
    const io = await SocketIoServer.start();
    try {
      const plan: AppendPlan = {
        conversations: ctx.quick ? 50 : 100,
        messages: ctx.quick ? 20 : 160,
        window: ctx.quick ? 5 : 8,
        clients: CLIENTS,
        settle: false,
        thinking: true,
      };
      const trios = await repeat(
        ctx,
        '(a2, a3)',
        reps(ctx, { warmups: 1, runs: 1 }, { warmups: 1, runs: 3 }),
        async (i) => {
          const pair = await pairedWithRaw(ctx, host, fleet, plan, i);
          const sio = await socketIoRun(io, fleet, pair.tether.payloads, plan.window);
          return {
            ...pair,
            sio: sio.perSecond,
            use: [...pair.use, sio.use],
            summary: `${pair.summary}; Socket.IO ${fmt.int(sio.perSecond)} msgs/s`,
          };
        },
      );
      const tether = median(trios.map((t) => t.tether.perSecond));
      const raw = median(trios.map((t) => t.rawPerSecond));
      const sio = median(trios.map((t) => t.sio));
      /** CPU µs per stored event of process `name` in the i-th measured run of each repetition (0 Tether, 2 Socket.IO). */
      const cpuPer = (name: string, i: number) =>
        median(trios.map((t) => (t.use[i]!.cpu[name] ?? 0) / t.tether.events)) * 1000;
      const cpu = (name: string, i: number) => fmt.int(cpuPer(name, i));
      ctx.note(
        `(a2, a3) CPU per message (median, µs): Tether host ${cpu('host', 0)} + nats-server ${cpu('nats-server', 0)}, its fleet ${cpu('fleet', 0)}; Socket.IO server ${cpu('socketio', 2)}, its fleet ${cpu('fleet', 2)}.`,
      );
      // A p99 over fewer messages is the longest pause of either process (one 10 ms GC pause in a
      // run of 1,000 messages decided it in --quick); 3,000 at least.
      const pacedMessages = Math.max(plan.messages, Math.ceil(3_000 / plan.conversations));
      const lat = await repeat(
        ctx,
        '(a4, a5)',
        reps(ctx, { warmups: 0, runs: 1 }, { warmups: 0, runs: 3 }),
        async () => {
          const t = await appendRun(host, fleet, { ...plan, messages: pacedMessages, perSecond: tether / 2 });
          const s = await socketIoRun(io, fleet, t.payloads, plan.window, sio / 2);
          const [p50, p99, s50, s99] = [
            latencyOf(t.paced, 50),
            latencyOf(t.paced, 99),
            latencyOf(s.paced, 50),
            latencyOf(s.paced, 99),
          ];
          return {
            p50,
            p99,
            s50,
            s99,
            use: [...t.use, s.use],
            summary: `Tether p50 ${fmt.ms(p50)} ms, p99 ${fmt.ms(p99)} ms at ${fmt.int(tether / 2)}/s; Socket.IO p50 ${fmt.ms(s50)} ms, p99 ${fmt.ms(s99)} ms at ${fmt.int(sio / 2)}/s`,
          };
        },
      );
      const m = (k: 'p50' | 'p99' | 's50' | 's99') => median(lat.map((l) => l[k]));
      const at = (rate: number) => ` at ${fmt.int(rate / 2)} msgs/s`;
      const what = (p: string) =>
        `append and deliver latency ${p}: from a user action due to the last client of its conversation having it, ${plan.conversations} conversations × ${CLIENTS} clients, each side open loop at half its own peak; Tether vs Socket.IO`;
      type Key = Parameters<typeof m>[0];
      const latency = (id: string, t: Key, b: Key, most: number): Row => ({
        id,
        what: what(t),
        tether: msFigure(m(t), at(tether)),
        baseline: msFigure(m(b), at(sio)),
        target: { op: '≤', value: most },
      });
      const rows: Row[] = [
        {
          id: 'a2',
          what: `append and deliver: user actions over ws → stored → delivered to every client, ${plan.conversations} conversations × ${CLIENTS} ws clients (1 sends, all receive), stored events/s vs raw JetStream async publish`,
          tether: per(tether, 'events/s'),
          baseline: per(raw, 'msgs/s'),
          target: { op: '≥', value: 0.5 },
        },
        {
          id: 'a3',
          what: `append and deliver as (a2) vs a Socket.IO 4.8 server with connection state recovery doing the same fan-out without storage, messages/s`,
          tether: per(tether, 'events/s'),
          baseline: per(sio, 'msgs/s'),
          target: { op: '>', value: 1, say: '(ahead of Socket.IO)' },
        },
        {
          id: 'a6',
          what: `CPU per stored-and-delivered event: the Tether host process in (a2) vs the Socket.IO server process in (a3) per delivered message, the same payloads and fan-out (${plan.conversations} conversations × ${CLIENTS} clients), median of the runs; CPU per delta: (o5)`,
          tether: {
            value: cpuPer('host', 0),
            text: `${fmt.int(cpuPer('host', 0))} µs/event (nats-server ${cpu('nats-server', 0)} µs)`,
          },
          baseline: { value: cpuPer('socketio', 2), text: `${fmt.int(cpuPer('socketio', 2))} µs/message` },
          target: { op: '≤', value: 1.5 },
        },
        latency('a4', 'p50', 's50', 1.5),
        latency('a5', 'p99', 's99', 2),
      ];
      return rows;
    } finally {
      await io.stop();
      await host.stop(ctx.nc);
      await fleet.stop();
    }
  },
};
