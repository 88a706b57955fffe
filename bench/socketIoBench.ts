// The Socket.IO baseline of the fan-out rows: the same payloads (the stored
// events a Tether run produced, same count, same bytes) sent by one client per
// room and broadcast by the server to the room's every client, sender included,
// with connection state recovery on and no storage. The server runs in this
// process as the Tether server does; its clients run in the client process.
import type { AroundTimed } from './appendBench.ts';
import type { ClientFleet, PacedTiming, RoomSpec } from './clientFleet.ts';
import { cpuMeter, describeCpu, fmt, within, type CpuUse } from './measure.ts';
import { startSocketIoServer } from './socketIoServer.ts';

export interface SocketIoPlan {
  clientsPerRoom: number;
  /** Messages each sender keeps in flight (not yet back from the broadcast). */
  window: number;
  /** Open loop instead: this many messages a second in all, each message's latency measured. */
  pacedPerSecond?: number;
  timeoutMs: number;
}

export interface SocketIoRun {
  messages: number;
  /** Messages the clients received (messages × clients per room). */
  frames: number;
  ms: number;
  perSecond: number;
  cpu: CpuUse;
  paced?: PacedTiming;
  summary: string;
}

/** Each client got each of its room's payloads once, in order, with the same JSON. */
function verify(rooms: readonly RoomSpec[], received: ReadonlyArray<ReadonlyArray<readonly [number, string]>>): void {
  let at = 0;
  for (const room of rooms) {
    for (let c = 0; c < room.clients; c++, at++) {
      const got = received[at];
      if (!got || got.length !== room.payloads.length) {
        throw new Error(
          `Socket.IO room ${room.room}, client ${c}: ${room.payloads.length} messages sent but ${got?.length ?? 0} received`,
        );
      }
      room.payloads.forEach((payload, k) => {
        if (got[k]![1] !== payload)
          throw new Error(
            `Socket.IO room ${room.room}, client ${c}: message ${k} differs from what was sent (lost, repeated or out of order)`,
          );
      });
    }
  }
  if (at !== received.length) throw new Error(`Socket.IO: ${received.length} clients reported, ${at} expected`);
}

/** One measured run on a fresh Socket.IO server, one room per conversation of `payloads`. */
export async function socketIoRun(
  natsPid: number,
  fleet: ClientFleet,
  payloads: readonly string[][],
  plan: SocketIoPlan,
  tag: string,
  around: AroundTimed = (work) => work(),
): Promise<SocketIoRun> {
  const server = await startSocketIoServer();
  const rooms: RoomSpec[] = payloads.map((list, i) => ({
    room: `${tag}-${i}`,
    payloads: list,
    clients: plan.clientsPerRoom,
  }));
  const perRoom = rooms[0]?.payloads.length ?? 0;
  if (plan.pacedPerSecond !== undefined && rooms.some((r) => r.payloads.length !== perRoom))
    throw new Error('a paced Socket.IO run needs as many payloads in every room');
  try {
    await within(plan.timeoutMs, 'connecting Socket.IO clients', fleet.connectSocketIo(server.url, rooms));
    const cpu = cpuMeter(natsPid, fleet.pid);
    const timed = async (): Promise<{ ms: number; paced?: PacedTiming }> => {
      // `run`'s message count is the rooms' payloads for the Socket.IO clients; settle does not apply.
      if (plan.pacedPerSecond === undefined) return { ms: await fleet.run(perRoom, plan.window, false) };
      const paced = await fleet.paced(perRoom, plan.pacedPerSecond);
      return { ms: paced.ms, paced };
    };
    const { ms, paced } = await around(() => within(plan.timeoutMs, 'the Socket.IO run', timed()));
    const used = cpu();
    const received = await within(plan.timeoutMs, 'collecting the Socket.IO messages', fleet.frames());
    verify(rooms, received);
    const messages = rooms.reduce((n, r) => n + r.payloads.length, 0);
    const perSecond = (messages / ms) * 1000;
    return {
      messages,
      frames: received.reduce((n, frames) => n + frames.length, 0),
      ms,
      perSecond,
      cpu: used,
      paced,
      summary: `${fmt.int(messages)} messages in ${fmt.ms(ms)} ms = ${fmt.int(perSecond)} msgs/s${paced ? ` (paced at ${fmt.int(plan.pacedPerSecond!)} messages/s)` : ''} (${describeCpu(used)})`,
    };
  } finally {
    await fleet.close().catch(() => undefined);
    await server.close();
  }
}
