// Baseline: what a user would otherwise write for live fan-out with replay
// after a drop: a socket.io 4.8 server with connection state recovery (every
// broadcast kept in memory with an offset, so a client back within two
// minutes gets what it missed), WebSocket transport only, no compression, one
// room per conversation, nothing stored. The server runs in a process of its
// own (SocketIoServer); its clients are Members of the fleet.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server, type Socket as ServerSocket } from 'socket.io';
import { io as connectIo, type Socket } from 'socket.io-client';
import { plug, type Frame, type Member } from '../harness/fleet.ts';
import { track, untrack } from '../harness/measure.ts';
import { Proc } from '../harness/proc.ts';

const EVENT = 'event';
/** This module, for the fleet to load. */
export const SOCKET_IO_MODULE = import.meta.url;
export const MAX_DISCONNECTION_MS = 2 * 60_000;

// In the server process.
let io: Server | undefined;

/** Listens on `port` (0: any); a client's room is its `auth.room`; `event`s from a client go to its whole room, sender included. */
export async function startSocketIo(port = 0): Promise<number> {
  const http = createServer();
  io = new Server(http, {
    connectionStateRecovery: { maxDisconnectionDuration: MAX_DISCONNECTION_MS, skipMiddlewares: true },
    transports: ['websocket'],
    perMessageDeflate: false,
    serveClient: false,
    maxHttpBufferSize: 1 << 20,
  });
  const server = io;
  server.on('connection', (socket) => {
    const room = (socket.handshake.auth as { room?: string }).room ?? '';
    // A recovered socket gets its rooms back by itself; a new one joins, as an application would.
    if (!socket.recovered) void socket.join(room);
    socket.on(EVENT, (payload: unknown) => server.to(room).emit(EVENT, payload));
  });
  await new Promise<void>((resolve, reject) => http.once('error', reject).listen(port, '127.0.0.1', resolve));
  return (http.address() as AddressInfo).port;
}

/** Sends `payload` to a room from the server, as an application emits what happened. */
export async function emitToRoom(room: string, payloads: unknown[]): Promise<void> {
  for (const p of payloads) io!.to(room).emit(EVENT, p);
}

/** Closes every connection and the listener: what was kept for recovery, in memory, is gone. */
export async function stopSocketIo(): Promise<void> {
  io?.disconnectSockets(true);
  await io?.close();
  io = undefined;
}

/** The bench's handle on the server process. */
export class SocketIoServer {
  readonly proc = new Proc('socketio');
  port = 0;
  static async start(port = 0): Promise<SocketIoServer> {
    const s = new SocketIoServer();
    track('socketio', s.proc.pid);
    s.port = await s.proc.call(import.meta.url, startSocketIo, [port]);
    return s;
  }
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  /** A new server in the same process, on the same port: what was kept for recovery is gone. */
  async restart(): Promise<void> {
    await this.proc.call(import.meta.url, stopSocketIo, []);
    await this.proc.call(import.meta.url, startSocketIo, [this.port]);
  }
  async stop(): Promise<void> {
    await this.proc.call(import.meta.url, stopSocketIo, []).catch(() => undefined);
    untrack('socketio');
    await this.proc.stop();
  }
}

/** A socket.io-client in a room (one WebSocket each); the sender emits the room's payloads, parsed, as an application would. */
export class SocketIoMember implements Member {
  readonly frames: Frame[] = [];
  onArrival: ((k: number) => void) | null = null;
  readonly socket: Socket;
  #failure: Error | null = null;
  #waiters: Array<{ p: number; resolve: () => void; reject: (e: Error) => void }> = [];

  constructor(
    url: string,
    readonly room: string,
    readonly payloads: readonly unknown[],
    connected: (err?: Error) => void,
  ) {
    // forceNew: one Manager, so one WebSocket, per client.
    this.socket = connectIo(url, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { room } });
    this.socket.on(EVENT, (payload: unknown) => {
      const k = this.frames.push([this.frames.length, JSON.stringify(payload)]) - 1;
      this.onArrival?.(k);
      this.#waiters = this.#waiters.filter((w) => (this.frames.length >= w.p ? (w.resolve(), false) : true));
    });
    this.socket.once('connect', () => {
      this.socket.on('disconnect', (reason) =>
        this.#fail(new Error(`socket.io client of ${room} disconnected (${reason})`)),
      );
      connected();
    });
    this.socket.once('connect_error', (err) => connected(err));
  }

  get position(): number {
    return this.frames.length;
  }

  send(k: number): void {
    this.socket.emit(EVENT, this.payloads[k]);
  }

  reached(p: number): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.frames.length >= p) return Promise.resolve();
    return new Promise((resolve, reject) => this.#waiters.push({ p, resolve, reject }));
  }

  close(): void {
    this.socket.off('disconnect');
    this.socket.disconnect();
  }

  #fail(err: Error): void {
    this.#failure ??= err;
    for (const w of this.#waiters.splice(0)) w.reject(err);
  }
}

/** A fleet command: `clients` members per room (the sender, holding the payloads, first). */
export async function connectRooms(url: string, rooms: Array<{ room: string; payloads: string[] }>, clients: number) {
  const groups = await Promise.all(
    rooms.map(({ room, payloads }) =>
      Promise.all(
        Array.from(
          { length: clients },
          (_, k) =>
            new Promise<Member>((resolve, reject) => {
              const m = new SocketIoMember(url, room, k ? [] : payloads.map((p) => JSON.parse(p) as unknown), (e) =>
                e ? reject(e) : resolve(m),
              );
            }),
        ),
      ),
    ),
  );
  plug(groups);
}

// Resume (f to f4): one client dropped and resumed, in the fleet; payloads are `[seq, event]`.
/** In the server: once its client is in `room`, emits `first` (its offset), awaits its drop (a transport close), emits `missed`. */
export async function emitAcrossDrop(room: string, first: unknown, missed: unknown[]): Promise<void> {
  const [present] = io!.sockets.adapter.rooms.get(room) ?? [];
  const socket =
    io!.sockets.sockets.get(present!) ?? (await new Promise<ServerSocket>((in_) => io!.once('connection', in_)));
  const lost = new Promise((gone) => socket.once('disconnect', gone));
  io!.to(room).emit(EVENT, first);
  if ((await lost) !== 'transport close') throw new Error(`the server saw "${String(await lost)}"`);
  await emitToRoom(room, missed);
}
let [resumer, got, poke] = [undefined as Socket | undefined, [] as number[], () => {}];
/** True once the client has the event of `seq` (or a later one); false after 10 s. */
const reach = (seq: number) =>
  new Promise<boolean>((resolve) => {
    setTimeout(() => resolve(false), 10_000).unref();
    (poke = () => (got.at(-1) ?? -1) >= seq && resolve(true))();
  });
const connected = (s: Socket) =>
  new Promise<void>((resolve, reject) => s.once('connect', resolve).once('connect_error', reject));
/** In the fleet: joins `room`; once it has `first`, its websocket is killed under it (the engine sees a transport close). */
export async function sioAway(url: string, room: string, first: number): Promise<void> {
  resumer = connectIo(url, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { room } });
  await connected(resumer.on(EVENT, ([seq]: [number]) => (got.push(seq), poke())));
  if (!(await reach(first))) throw new Error(`the Socket.IO client never got ${first}`);
  const gone = new Promise((resolve) => resumer!.once('disconnect', resolve));
  (resumer.io.engine.transport as unknown as { ws: { terminate(): void } }).ws.terminate();
  if ((await gone) !== 'transport close') throw new Error('the Socket.IO client saw no transport close');
}
/** `socket.connect()` again, timed until connected and, when recovered, until it has `lastSeq`. */
export async function sioResume(lastSeq: number) {
  const t0 = performance.now();
  got = [];
  await connected(resumer!.connect());
  const connectMs = performance.now() - t0;
  const caughtUp = resumer!.recovered && (await reach(lastSeq));
  return { ms: performance.now() - t0, connectMs, recovered: resumer!.recovered, caughtUp };
}
/** Once the live `probe` came (or 10 s passed): the `missed` seqs received once, and whether exactly they came, then it. */
export async function sioSeqs(probe: number, missed: number[]) {
  await reach(probe);
  resumer!.close();
  const seqs = got.splice(0);
  const once = missed.filter((s) => seqs.indexOf(s) >= 0 && seqs.indexOf(s) === seqs.lastIndexOf(s)).length;
  return { got: once, gapless: seqs.join() === [...missed, probe].join() };
}
