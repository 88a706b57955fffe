// A lean socket.io-client for the Socket.IO baseline, the counterpart of
// BenchClient: one per room member, in the bench's client process. The sender
// emits the room's payloads (stored-event JSON that Tether produced, sent as
// the objects an application would emit); every member, the sender included,
// gets each one back from the server's room broadcast.
import { io, type Socket } from 'socket.io-client';
import type { PacedMember } from './latencyPacing.ts';
import { SOCKET_IO_EVENT } from './socketIoEvent.ts';

export class SocketIoBenchClient implements PacedMember {
  /** What reached this client, in order of arrival. */
  readonly received: unknown[] = [];
  onArrival: ((k: number) => void) | null = null;
  readonly failed: Promise<never>;
  readonly #socket: Socket;
  readonly #payloads: readonly unknown[];
  #rejectFailed: (err: Error) => void = () => {};
  #sent = 0;
  #window = 1;
  #waiting: { count: number; resolve: () => void } | null = null;

  private constructor(socket: Socket, payloads: readonly unknown[]) {
    this.#socket = socket;
    this.#payloads = payloads;
    this.failed = new Promise<never>((_, reject) => (this.#rejectFailed = reject));
    this.failed.catch(() => undefined);
  }

  /** Connects to `room` over a WebSocket of its own; `payloads` are what it sends (empty for a watcher). */
  static connect(url: string, room: string, payloads: readonly string[]): Promise<SocketIoBenchClient> {
    // forceNew: one Manager, so one WebSocket, per client (socket.io would otherwise share one per URL).
    const socket = io(url, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { room } });
    const client = new SocketIoBenchClient(
      socket,
      payloads.map((p) => JSON.parse(p) as unknown),
    );
    // With connection state recovery the server appends the packet's offset as a last argument.
    socket.on(SOCKET_IO_EVENT, (payload: unknown) => client.#onMessage(payload));
    return new Promise((resolve, reject) => {
      socket.once('connect', () => {
        socket.on('disconnect', (reason) =>
          client.#rejectFailed(new Error(`socket.io client of ${room} disconnected (${reason})`)),
        );
        resolve(client);
      });
      socket.once('connect_error', reject);
    });
  }

  /** Sends every payload, at most `window` not yet back; resolves when all are back. */
  run(window: number): Promise<void> {
    this.#window = window;
    const done = this.until(this.#payloads.length);
    this.#topUp();
    return Promise.race([done, this.failed]);
  }

  /** Resolves once `count` messages have arrived. */
  until(count: number): Promise<void> {
    if (this.received.length >= count) return Promise.resolve();
    return Promise.race([new Promise<void>((resolve) => (this.#waiting = { count, resolve })), this.failed]);
  }

  sendMessage(k: number): void {
    const payload = this.#payloads[k];
    if (payload === undefined) throw new RangeError(`no payload ${k}: the room has ${this.#payloads.length}`);
    this.#socket.emit(SOCKET_IO_EVENT, payload);
  }

  close(): void {
    this.#socket.off('disconnect');
    this.#socket.disconnect();
  }

  #topUp(): void {
    while (this.#sent < this.#payloads.length && this.#sent - this.received.length < this.#window)
      this.sendMessage(this.#sent++);
  }

  #onMessage(payload: unknown): void {
    const k = this.received.push(payload) - 1;
    this.onArrival?.(k);
    if (this.#sent > 0) this.#topUp();
    if (this.#waiting && this.received.length >= this.#waiting.count) {
      this.#waiting.resolve();
      this.#waiting = null;
    }
  }
}
