// (f) The baseline of resume after a drop: Socket.IO 4.8 with connection state
// recovery, its server in this process, its client in resumeProcess.ts. The
// client is in a room, its websocket is killed under it, the same events as
// Tether's are emitted to the room meanwhile (across a server restart in one
// case), and it connects again with its recovery offset.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Server } from 'socket.io';
import { cpuMeter, describeCpu, fmt, within, type CpuUse } from './measure.ts';
import type { Frame, ResumeClients } from './resumeClients.ts';

const ROOM = 'conversation';
/** Socket.IO's default: how long a dropped client's session and the packets it may miss are kept. */
const MAX_DISCONNECTION_MS = 2 * 60_000;

/** A Socket.IO server on its own HTTP server; every client joins one room. */
class SocketIoHost {
  readonly port: number;
  readonly #io: Server;
  #disconnected: Array<(reason: string) => void> = [];

  private constructor(io: Server, port: number) {
    this.#io = io;
    this.port = port;
    io.on('connection', (socket) => {
      // A recovered socket gets its rooms back by itself; a new one joins here, as an application would.
      if (!socket.recovered) void socket.join(ROOM);
      socket.on('disconnect', (reason) => this.#disconnected.splice(0).forEach((notify) => notify(reason)));
    });
  }

  static async start(port = 0): Promise<SocketIoHost> {
    const http = createServer();
    const io = new Server(http, {
      connectionStateRecovery: { maxDisconnectionDuration: MAX_DISCONNECTION_MS, skipMiddlewares: true },
      transports: ['websocket'],
      serveClient: false,
    });
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(port, '127.0.0.1', () => resolve());
    });
    return new SocketIoHost(io, (http.address() as AddressInfo).port);
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Resolves with the reason of the next disconnect the server sees. */
  nextDisconnect(): Promise<string> {
    return new Promise((resolve) => this.#disconnected.push(resolve));
  }

  emit(seq: number, event: unknown): void {
    this.#io.to(ROOM).emit('event', seq, event);
  }

  /** Closes every connection and the listener: the sessions and packets kept for recovery, in memory, are gone. */
  close(): Promise<void> {
    return new Promise((resolve) => void this.#io.close(() => resolve()));
  }
}

export interface SocketIoResumeRun {
  missed: number;
  /** Missed events the client received after reconnecting, each exactly once. */
  recovered: number;
  /** `socket.recovered` after the reconnect. */
  recoveredFlag: boolean;
  /** The missed events, then the live probe, exactly once and in order. */
  gapless: boolean;
  /** Reconnect (`socket.connect()`) to connected and, when recovered, every missed event received. */
  ms: number;
  connectMs: number;
  restartMs?: number;
  cpu: CpuUse;
  summary: string;
}

/**
 * One resume on Socket.IO: the client connects and has one event (its
 * recovery offset), is dropped, `payloads` are emitted to its room (half, a
 * server restart on the same port, the other half when `restart`), then it
 * connects again. Timed in the client process as on Tether's side.
 */
export async function socketIoResumeRun(
  natsPid: number,
  clients: ResumeClients,
  before: Frame,
  payloads: readonly Frame[],
  restart: boolean,
  timeoutMs: number,
): Promise<SocketIoResumeRun> {
  const events = payloads.map(([seq, json]) => [seq, JSON.parse(json)] as const);
  let host = await SocketIoHost.start();
  try {
    await clients.ask({ type: 'sio.connect', url: host.url }, 'ok');
    host.emit(before[0], JSON.parse(before[1]));
    await clients.ask({ type: 'sio.until', seq: before[0] }, 'ok');
    const seen = host.nextDisconnect();
    await clients.ask({ type: 'sio.drop' }, 'dropped');
    const reason = await within(timeoutMs, 'the Socket.IO server seeing the drop', seen);
    if (reason !== 'transport close') throw new Error(`the Socket.IO server saw "${reason}", not a transport close`);

    const first = restart ? Math.floor(events.length / 2) : events.length;
    for (const [seq, event] of events.slice(0, first)) host.emit(seq, event);
    let restartMs: number | undefined;
    if (restart) {
      const t0 = performance.now();
      const { port } = host;
      await host.close();
      host = await SocketIoHost.start(port);
      restartMs = performance.now() - t0;
      for (const [seq, event] of events.slice(first)) host.emit(seq, event);
    }

    const lastSeq = events.at(-1)![0];
    const cpu = cpuMeter(natsPid, clients.pid);
    const resumed = await within(
      timeoutMs,
      'the Socket.IO resume',
      clients.ask({ type: 'sio.resume', lastSeq }, 'resumed'),
    );
    const used = cpu();
    const probe = lastSeq + 1;
    host.emit(probe, JSON.parse(before[1]));
    await within(timeoutMs, 'the Socket.IO live probe', clients.ask({ type: 'sio.until', seq: probe }, 'ok'));
    const { seqs } = await clients.ask({ type: 'sio.frames' }, 'seqs');
    await clients.ask({ type: 'close' }, 'ok');

    const count = new Map<number, number>();
    for (const seq of seqs) count.set(seq, (count.get(seq) ?? 0) + 1);
    const recovered = events.filter(([seq]) => count.get(seq) === 1).length;
    const expected = [...events.map(([seq]) => seq), probe];
    const gapless = seqs.length === expected.length && seqs.every((seq, i) => seq === expected[i]);
    const restartNote = restartMs === undefined ? '' : `, restart ${fmt.ms(restartMs)} ms`;
    return {
      missed: events.length,
      recovered,
      recoveredFlag: resumed.recovered,
      gapless,
      ms: resumed.ms,
      connectMs: resumed.connectMs,
      ...(restartMs !== undefined && { restartMs }),
      cpu: used,
      summary:
        `${fmt.int(recovered)}/${fmt.int(events.length)} missed events recovered (socket.recovered ${resumed.recovered}), ${gapless ? 'gapless' : 'not gapless'}, ` +
        `${resumed.recovered ? 'caught up' : 'connected, nothing to catch up'} in ${fmt.ms(resumed.ms)} ms (connect ${fmt.ms(resumed.connectMs)} ms)${restartNote} (${describeCpu(used)})`,
    };
  } finally {
    await host.close();
  }
}
