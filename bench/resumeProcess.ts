// The resume benchmark's clients, in a node process of their own (started by
// resumeClients.ts), as real clients are other programs: Tether's watching ws
// client and the REST writer that stores events while it is away, and the
// Socket.IO client. Each is dropped abruptly and reconnects; this process
// times its own catch-up. Commands and replies travel over the IPC channel.
import { performance } from 'node:perf_hooks';
import { io, type Socket } from 'socket.io-client';
import type WebSocket from 'ws';
import { protocolClient, type ProtocolClient } from '../src/client/index.ts';
import { BenchSocket } from './benchSocket.ts';

/** An event frame as received: its seq and the event's JSON text as the server sent it. */
export type Frame = [seq: number, eventJson: string];

export type ResumeCommand =
  /** Opens Tether's watcher at `url` (`/ws?...&after_seq=N`); answers once `sync` arrived. */
  | { type: 'tether.watch'; url: string }
  /** Posts `count` user messages to `url` (the actions route) as `user`, `window` at a time; answers their seqs. */
  | ({ type: 'tether.write' } & Writes)
  /** Posts one message and waits until the watcher has it: the watcher is live. (Every wait is bounded: see WAIT_LIMIT_MS.) */
  | { type: 'tether.probe'; url: string; user: string; label: string }
  /** Drops the watcher without a close handshake (TCP closed, as a lost network or a killed tab). */
  | { type: 'tether.drop' }
  /**
   * Reconnects at `url` (with the cursor) and times it until every event through `lastSeq` and the sync's
   * `through_seq` is in. With `during`, that many messages are posted meanwhile (the seam between history and live).
   */
  | { type: 'tether.resume'; url: string; lastSeq: number; during?: Writes }
  /** The watcher's event frames since it last connected. */
  | { type: 'tether.frames' }
  | { type: 'sio.connect'; url: string }
  /** Waits until the Socket.IO client has the event of this seq (or a later one). */
  | { type: 'sio.until'; seq: number }
  /** Kills the Socket.IO client's websocket under it: the engine sees a transport close, as with a lost network. */
  | { type: 'sio.drop' }
  /** `socket.connect()` again and times it until connected and, when recovered, until the event of `lastSeq` is in. */
  | { type: 'sio.resume'; lastSeq: number }
  /** The seqs of the events the Socket.IO client received since its last connect. */
  | { type: 'sio.frames' }
  | { type: 'close' };

/** `count` user messages posted to `url` (the actions route) as `user`, `window` at a time. */
export interface Writes {
  url: string;
  user: string;
  count: number;
  window: number;
  label: string;
}

export type ResumeReply =
  | { type: 'ok' }
  | { type: 'dropped'; cursor: number }
  | { type: 'written'; seqs: number[] }
  | { type: 'probed'; seq: number; ms: number }
  | {
      type: 'resumed';
      ms: number;
      connectMs: number;
      throughSeq: number;
      recovered: boolean;
      caughtUp: boolean;
      during: number[];
    }
  | { type: 'frames'; frames: Frame[] }
  | { type: 'seqs'; seqs: number[] }
  | { type: 'failed'; error: string };

/** Tether's watching client (the protocol client): keeps every event frame, fails on an error frame or an unexpected close. */
class Watcher {
  readonly frames: Frame[] = [];
  #client: ProtocolClient<BenchSocket> | null = null;
  #closing = false;
  readonly #afterSeq: number;
  #throughSeq = -1;
  #waiting: Array<{ seq: number; resolve: () => void; reject: (err: Error) => void }> = [];
  #failure: Error | null = null;

  private constructor(afterSeq: number) {
    this.#afterSeq = afterSeq;
  }

  /** Opens the socket; resolves on the `sync` frame with the time it took. */
  static open(url: string): Promise<{ watcher: Watcher; syncMs: number }> {
    const t0 = performance.now();
    const afterSeq = Number(new URL(url).searchParams.get('after_seq') ?? 0);
    const watcher = new Watcher(afterSeq);
    return new Promise((resolve, reject) => {
      let synced = false;
      const failed = (err: Error) => (synced ? watcher.#fail(err) : reject(err));
      watcher.#client = protocolClient({
        WebSocket: BenchSocket,
        url,
        reconnect: false,
        handlers: {
          sync: (frame) => {
            synced = true;
            watcher.#throughSeq = frame.through_seq;
            resolve({ watcher, syncMs: performance.now() - t0 });
          },
          event: (frame, text) => watcher.#event(frame.seq, text),
          error: (_frame, text) => watcher.#fail(new Error(`server error frame: ${text}`)),
          invalid: (frame) => {
            // An event the server sent twice or out of order is kept, as it came, for verifyResume to find.
            const event = frame.reason === 'order' ? (frame.value as { type?: string; seq?: number }) : undefined;
            if (event?.type === 'event' && event.seq !== undefined) watcher.#event(event.seq, frame.raw);
            else failed(new Error(`the watcher's ws: ${frame.problem}: ${frame.raw.slice(0, 300)}`));
          },
          socketError: (event) => failed((event as { error?: Error }).error ?? new Error('socket error')),
          close: ({ code, reason }) => {
            if (!watcher.#closing) failed(new Error(`the watcher's ws closed (${code} ${reason})`));
          },
        },
      });
    });
  }

  /** The `through_seq` of the sync frame: the conversation's last stored seq when the watcher joined. */
  get throughSeq(): number {
    return this.#throughSeq;
  }

  /** The cursor: the seq of the last event frame received, else the one it connected after. */
  get lastSeq(): number {
    return this.frames.at(-1)?.[0] ?? this.#afterSeq;
  }

  /** Resolves once an event frame at or past `seq` has arrived. */
  until(seq: number): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.lastSeq >= seq) return Promise.resolve();
    return new Promise((resolve, reject) => this.#waiting.push({ seq, resolve, reject }));
  }

  terminate(): void {
    this.#closing = true;
    this.#client?.socket?.terminate();
  }

  #event(seq: number, text: string): void {
    // The event's own JSON, cut from the frame text: what the server sent, byte for byte.
    this.frames.push([seq, text.slice(text.indexOf('"event":') + 8, -1)]);
    this.#settle();
  }

  #settle(): void {
    const last = this.lastSeq;
    this.#waiting = this.#waiting.filter((w) => (w.seq <= last ? (w.resolve(), false) : true));
  }

  #fail(err: Error): void {
    this.#failure ??= err;
    for (const w of this.#waiting.splice(0)) w.reject(err);
  }
}

async function postMessage(url: string, user: string, content: string, clientId: string): Promise<number> {
  const body = JSON.stringify({ action: { type: 'message', content }, client_id: clientId });
  // One retry with the same client_id: a request that met a socket the server had just closed is stored once anyway.
  for (let attempt = 0; ; attempt++) {
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-bench-user': user },
        body,
      });
      if (res.status !== 202) throw new Error(`POST ${url}: HTTP ${res.status} ${await res.text()}`);
      return ((await res.json()) as { seq: number }).seq;
    } catch (err) {
      if (attempt >= 1 || (err instanceof Error && err.message.startsWith('POST '))) throw err;
    }
  }
}

/**
 * How long a client waits for an event it expects before it reports what it
 * has: a missing event is a finding for the report, not a reason to hang.
 */
const WAIT_LIMIT_MS = 10_000;

/** True once `arrived` resolves, false when WAIT_LIMIT_MS pass first. */
async function bounded(arrived: Promise<void>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), WAIT_LIMIT_MS)));
  try {
    return await Promise.race([arrived.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Posts the messages, `window` requests in flight; their seqs in the order of their text's index. */
async function write(w: Writes): Promise<number[]> {
  const seqs = new Array<number>(w.count);
  let next = 0;
  const worker = async () => {
    while (next < w.count) {
      const i = next++;
      seqs[i] = await postMessage(w.url, w.user, text(w.label, i), `${w.label}-${i}`);
    }
  };
  await Promise.all(Array.from({ length: Math.min(w.window, w.count) }, worker));
  return seqs;
}

const FILLER = 'The quick brown fox jumps over the lazy dog while the watcher is away. ';
const text = (label: string, i: number) => `${label} message ${i}: ${FILLER}`.slice(0, 120);

let watcher: Watcher | null = null;
let sio: Socket | null = null;
let sioSeqs: number[] = [];
let sioWaiting: Array<{ seq: number; resolve: () => void }> = [];

function sioUntil(seq: number): Promise<void> {
  if ((sioSeqs.at(-1) ?? -1) >= seq) return Promise.resolve();
  return new Promise((resolve) => sioWaiting.push({ seq, resolve }));
}

function sioConnected(socket: Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    const ok = () => {
      socket.off('connect_error', failed);
      resolve();
    };
    const failed = (err: Error) => {
      socket.off('connect', ok);
      reject(err);
    };
    socket.once('connect', ok);
    socket.once('connect_error', failed);
  });
}

async function handle(command: ResumeCommand): Promise<ResumeReply> {
  switch (command.type) {
    case 'tether.watch':
      watcher?.terminate();
      watcher = (await Watcher.open(command.url)).watcher;
      return { type: 'ok' };
    case 'tether.write':
      return { type: 'written', seqs: await write(command) };
    case 'tether.probe': {
      if (!watcher) throw new Error('probe without a watcher');
      const t0 = performance.now();
      const seq = await postMessage(command.url, command.user, text(command.label, 0), command.label);
      await bounded(watcher.until(seq));
      return { type: 'probed', seq, ms: performance.now() - t0 };
    }
    case 'tether.drop': {
      if (!watcher) throw new Error('drop without a watcher');
      const cursor = watcher.lastSeq;
      watcher.terminate();
      watcher = null;
      return { type: 'dropped', cursor };
    }
    case 'tether.resume': {
      const during = command.during ? write(command.during) : Promise.resolve([]);
      const t0 = performance.now();
      const opened = await Watcher.open(command.url);
      watcher = opened.watcher;
      const caughtUp = await bounded(watcher.until(Math.max(command.lastSeq, watcher.throughSeq)));
      const ms = performance.now() - t0;
      const seqs = await during;
      await bounded(watcher.until(Math.max(...seqs, -1)));
      return {
        type: 'resumed',
        ms,
        connectMs: opened.syncMs,
        throughSeq: watcher.throughSeq,
        recovered: true,
        caughtUp,
        during: seqs,
      };
    }
    case 'tether.frames':
      return { type: 'frames', frames: watcher?.frames ?? [] };
    case 'sio.connect': {
      sio?.close();
      sioSeqs = [];
      sio = io(command.url, { transports: ['websocket'], reconnection: false, forceNew: true });
      sio.on('event', (seq: number) => {
        sioSeqs.push(seq);
        sioWaiting = sioWaiting.filter((w) => (w.seq <= seq ? (w.resolve(), false) : true));
      });
      await sioConnected(sio);
      return { type: 'ok' };
    }
    case 'sio.until':
      await bounded(sioUntil(command.seq));
      return { type: 'ok' };
    case 'sio.drop': {
      if (!sio) throw new Error('drop without a Socket.IO client');
      const socket = sio;
      const gone = new Promise<string>((resolve) => socket.once('disconnect', (reason) => resolve(reason)));
      // engine.io-client's node websocket transport holds a `ws` WebSocket.
      (socket.io.engine.transport as unknown as { ws: WebSocket }).ws.terminate();
      const reason = await gone;
      if (reason !== 'transport close') throw new Error(`the Socket.IO client saw "${reason}", not a transport close`);
      return { type: 'dropped', cursor: sioSeqs.at(-1) ?? -1 };
    }
    case 'sio.resume': {
      if (!sio) throw new Error('resume without a Socket.IO client');
      const socket = sio;
      const t0 = performance.now();
      sioSeqs = [];
      const connected = sioConnected(socket);
      socket.connect();
      await connected;
      const connectMs = performance.now() - t0;
      // A recovered socket has had its missed packets (they come before the CONNECT packet); one that was not gets none.
      const caughtUp = socket.recovered ? await bounded(sioUntil(command.lastSeq)) : false;
      return {
        type: 'resumed',
        ms: performance.now() - t0,
        connectMs,
        throughSeq: -1,
        recovered: socket.recovered,
        caughtUp,
        during: [],
      };
    }
    case 'sio.frames':
      return { type: 'seqs', seqs: sioSeqs };
    case 'close':
      watcher?.terminate();
      watcher = null;
      sio?.close();
      sio = null;
      return { type: 'ok' };
  }
}

let queue: Promise<unknown> = Promise.resolve();
process.on('message', (command: ResumeCommand) => {
  queue = queue.then(() =>
    handle(command).then(
      (reply) => process.send?.(reply),
      (err: unknown) =>
        process.send?.({
          type: 'failed',
          error: err instanceof Error ? (err.stack ?? err.message) : String(err),
        } satisfies ResumeReply),
    ),
  );
});
// The parent going away ends the clients too.
process.on('disconnect', () => process.exit(0));
