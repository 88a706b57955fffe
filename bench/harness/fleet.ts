// The client fleet: every client of a run in one node process of its own, as
// real clients are other programs. Tether's clients are the project's
// protocol client (src/client/); a baseline plugs its own clients in as
// Members. The exported functions are the fleet's commands, called in the
// fleet process through Proc; `Fleet` starts that process.
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { protocolClient, type EventFrame, type ProtocolClient } from '../../src/client/index.ts';
import { track, untrack } from './measure.ts';
import { Proc } from './proc.ts';

/** A frame as received: its seq (a baseline: its position) and the event's JSON as sent. */
export type Frame = [seq: number, json: string];
/** A delta frame as received: how many event frames came before it, its JSON, and when (epoch ms, across processes). */
export type Delta = [events: number, json: string, at: number];

/** A client of a conversation (a baseline's: of a room). `send(k)`: the k-th message (senders only);
 * `onArrival(k)`: the k-th reached it; `position`: its cursor (a baseline: messages received);
 * `reached(p)` rejects when the client fails. */
export interface Member {
  send(k: number): void;
  onArrival: ((k: number) => void) | null;
  readonly position: number;
  reached(p: number): Promise<void>;
  readonly frames: Frame[];
  close(): void;
}

export interface ClientSpec {
  ws: string;
  user: string;
  conversationId: string;
  afterSeq: number;
  /** Picks the messages' text: distinct per conversation. */
  index: number;
  sends: boolean;
}

const FILLER = 'The quick brown fox jumps over the lazy dog while the benchmark keeps the agent busy. ';
/** The i-th message of client `c`: about 120 characters, distinct per client and index. */
export const messageText = (c: number, i: number) => `bench client ${c} message ${i}: ${FILLER}`.slice(0, 120);

class WsSocket extends WebSocket {
  constructor(url: string) {
    super(url, { perMessageDeflate: false });
  }
}

/** A Tether client that checks each user message it gets is its conversation's next one, by content. */
export class TetherMember implements Member {
  readonly frames: Frame[] = [];
  readonly deltas: Delta[] = [];
  onArrival: ((k: number) => void) | null = null;
  onFrame: (() => void) | null = null;
  /** The last agent state fact. */
  settled = { seq: -1, state: '' };
  lastUserSeq = -1;
  echoed = 0;
  readonly client: ProtocolClient<WsSocket>;
  #failure: Error | null = null;
  #waiters: Array<{ p: number; resolve: () => void; reject: (e: Error) => void }> = [];
  #closing = false;
  readonly #onFail: (err: Error) => void;

  constructor(
    readonly spec: ClientSpec,
    synced: (err?: Error) => void,
  ) {
    const { ws, user, conversationId: id, afterSeq } = spec;
    this.#onFail = synced;
    this.client = protocolClient({
      WebSocket: WsSocket,
      url: `${ws}/ws?token=${user}&conversation_id=${id}&after_seq=${afterSeq}`,
      reconnect: false,
      handlers: {
        sync: () => synced(),
        event: (frame, text) => this.#event(frame, text),
        delta: (_, text) => this.deltas.push([this.frames.length, text, performance.timeOrigin + performance.now()]),
        error: (_f, text) => this.fail(new Error(`error frame on ${id}: ${text}`)),
        invalid: (f) => this.fail(new Error(`${id}: ${f.problem}: ${f.raw.slice(0, 300)}`)),
        socketError: (e) => this.fail((e as { error?: Error }).error ?? new Error(`socket error on ${id}`)),
        close: ({ code, reason }) => this.#closing || this.fail(new Error(`ws of ${id} closed (${code} ${reason})`)),
      },
    });
  }

  get position(): number {
    return this.frames.at(-1)?.[0] ?? this.spec.afterSeq;
  }

  send(k: number): void {
    // No client_id: each message is stored once without JetStream's dedupe.
    this.client.send({ type: 'message', content: messageText(this.spec.index, k) }, null);
  }

  reached(p: number): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.position >= p) return Promise.resolve();
    return new Promise((resolve, reject) => this.#waiters.push({ p, resolve, reject }));
  }

  close(): void {
    this.#closing = true;
    this.client.close(1000);
  }

  fail(err: Error): void {
    if (this.#failure) return;
    this.#failure = err;
    this.#onFail(err);
    for (const w of this.#waiters.splice(0)) w.reject(err);
  }

  #event(frame: EventFrame, text: string): void {
    const { seq, event } = frame as unknown as {
      seq: number;
      event: { type: string; source: string; data?: { state?: string; content?: string } };
    };
    // The event's own JSON cut from the frame: what the server sent, byte for byte.
    this.frames.push([seq, text.slice(text.indexOf('"event":') + 8, -1)]);
    if (event.type === 'agent_state_changed') this.settled = { seq, state: event.data?.state ?? '' };
    if (event.type === 'message' && event.source === 'user') {
      const k = this.echoed++;
      if (event.data?.content !== messageText(this.spec.index, k))
        return this.fail(
          new Error(`user message ${k} of ${this.spec.conversationId} came back as ${event.data?.content}`),
        );
      this.lastUserSeq = seq;
      this.onArrival?.(k);
    }
    this.#waiters = this.#waiters.filter((w) => (seq >= w.p ? (w.resolve(), false) : true));
    this.onFrame?.();
  }
}

// The fleet process's clients, grouped by conversation, the sender first.
let groups: Member[][] = [];

/** Connects every client (each resolves on its `sync` frame), grouped by conversation, senders first. */
export async function connect(specs: ClientSpec[]): Promise<void> {
  const byId = new Map<string, Member[]>();
  const open = (spec: ClientSpec) =>
    new Promise<void>((resolve, reject) => {
      const m = new TetherMember(spec, (err) => (err ? reject(err) : resolve()));
      byId.set(spec.conversationId, [...(byId.get(spec.conversationId) ?? []), m]);
    });
  await Promise.all([...specs].sort((a, b) => Number(b.sends) - Number(a.sends)).map(open));
  plug([...byId.values()]);
}

/** Makes these the fleet's clients (a baseline's connect calls it). */
export const plug = (g: Member[][]) => void (groups = g);

/**
 * Closed loop: each sender sends `messages`, at most `window` not yet back;
 * with `settle` (whole turns) a conversation is done when the agent has left
 * `running` after its last message. Resolves with the time from the first send
 * to every client of every conversation having what its sender has.
 */
export async function run(messages: number, window: number, settle: boolean): Promise<number> {
  const t0 = performance.now();
  await Promise.all(
    groups.map(async ([s, ...watchers]) => {
      const sender = s!;
      let sent = 0;
      let back = 0;
      const topUp = () => {
        while (sent < messages && sent - back < window) sender.send(sent++);
      };
      const done = () =>
        back === messages &&
        (!settle ||
          !(sender instanceof TetherMember) ||
          (sender.settled.seq > sender.lastUserSeq && sender.settled.state !== 'running'));
      await new Promise<void>((resolve, reject) => {
        sender.reached(Number.MAX_SAFE_INTEGER).catch(reject);
        const check = () => done() && resolve();
        sender.onArrival = () => {
          back++;
          topUp();
          check();
        };
        if (sender instanceof TetherMember) sender.onFrame = check;
        topUp();
      });
      sender.onArrival = null;
      if (sender instanceof TetherMember) sender.onFrame = null;
      await Promise.all(watchers.map((w) => w.reached(sender.position)));
    }),
  );
  return performance.now() - t0;
}

/** Per message (k × conversations + c): ms from when it was due to the last client of its conversation having it. */
export type Paced = { ms: number; latencies: Float64Array };

/**
 * Open loop: message k of conversation c is due at (k × conversations + c) /
 * perSecond and sent when due, whatever has come back (timers, ~1 ms steps).
 */
export function paced(messages: number, perSecond: number): Promise<Paced> {
  const total = groups.length * messages;
  const latencies = new Float64Array(total);
  const arrivals = new Uint16Array(total);
  const t0 = performance.now() + 5;
  const due = (g: number) => t0 + (g * 1000) / perSecond;
  let delivered = 0;
  let next = 0;
  let timer: NodeJS.Timeout | undefined;
  return new Promise<Paced>((resolve, reject) => {
    groups.forEach((members, c) =>
      members.forEach((m) => {
        m.reached(Number.MAX_SAFE_INTEGER).catch(reject);
        m.onArrival = (k) => {
          const g = k * groups.length + c;
          if (k >= messages || g >= next) return reject(new Error(`message ${k} of ${c} arrived but was never sent`));
          if (++arrivals[g]! < members.length) return;
          latencies[g] = performance.now() - due(g);
          if (++delivered === total) resolve({ ms: performance.now() - t0, latencies });
        };
      }),
    );
    const tick = () => {
      const now = performance.now();
      while (next < total && due(next) <= now) {
        const g = next++;
        groups[g % groups.length]![0]!.send(Math.floor(g / groups.length));
      }
      if (next < total) timer = setTimeout(tick, Math.max(0, due(next) - performance.now()));
    };
    timer = setTimeout(tick, 5);
  }).finally(() => {
    clearTimeout(timer);
    groups.flat().forEach((m) => (m.onArrival = null));
  });
}

/** Every client's frames, group by group (sender first). Asked apart from the run: their shipping is not timed. */
export async function frames(): Promise<Frame[][]> {
  return groups.flat().map((m) => m.frames);
}

/** Every Tether client's delta frames, as `frames()`. */
export async function deltas(): Promise<Delta[][]> {
  return groups.flat().map((m) => (m instanceof TetherMember ? m.deltas : []));
}

export async function close(): Promise<void> {
  groups.flat().forEach((m) => m.close());
  groups = [];
}

/** The bench's handle: the fleet process, tracked for CPU and memory. */
export class Fleet {
  readonly proc = new Proc('fleet');
  constructor() {
    track('fleet', this.proc.pid);
  }
  call: Proc['call'] = (module, fn, args, timeoutMs) => this.proc.call(module, fn, args, timeoutMs);
  /** Calls one of this module's commands in the fleet process. */
  do<A extends unknown[], R>(fn: (...args: A) => R, ...args: A): Promise<Awaited<R>> {
    return this.proc.call(import.meta.url, fn, args);
  }
  async stop(): Promise<void> {
    untrack('fleet');
    await this.proc.stop();
  }
}
