import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';

/** Messages one pull request may ask for; its bytes are bounded too (see CreditedPullOptions.maxBytes). */
const BATCH = 1_000;
/** Pull requests outstanding at once: the next is waiting on the server when one ends, so delivery never pauses. */
const OUTSTANDING = 2;
/** How long a pull request waits on the server before it ends (and another replaces it). */
const EXPIRES_MS = 30_000;
const NANOS_PER_MS = 1_000_000;

export interface CreditedPullOptions {
  nc: NatsConnection;
  stream: string;
  /** The consumer's name on the server (an ordered consumer nats.js made: no acks, one delivery). */
  consumer: string;
  /** The bytes one request may ask for: far below what nats-server queues for a client before it drops it. */
  maxBytes: number;
  /** The server's heartbeat on a waiting request; two missed in a row end the pull as `silent`. */
  heartbeatMs: number;
}

/** Why a pull ended: stopped by its owner, no heartbeat from the server, or a message skipped (the consumer was reset). */
export type PullEnd = 'stopped' | 'silent' | 'gap';

/**
 * Pulls every message of one consumer, in order, with requests that bound
 * both the messages and the bytes each may bring. nats.js' `consume()` takes
 * one bound or the other: with bytes it asks for 100 messages at most, and a
 * request that ends on that count leaves its unused bytes counted as pending,
 * so later requests ask for ever fewer bytes until one is refused and the
 * consumer stalls until heartbeats are missed (seen once per bench run); with
 * messages only, a burst of large events could exceed what nats-server queues
 * for the connection. Here a request ends on its count, or on the server's
 * 408 (expired) or 409 (its bytes are used up), and another takes its place at
 * once, while a second already waits: at most OUTSTANDING × maxBytes are ever
 * on their way, and at most BATCH messages pass before the next request.
 *
 * Each request has its own inbox, so the server's status answers name it.
 * `done` rejects when the server refuses a request (the consumer is gone, no
 * JetStream) or `onMessage` throws: the owner opens a new consumer.
 */
export class CreditedPull {
  readonly done: Promise<PullEnd>;
  readonly #options: CreditedPullOptions;
  readonly #onMessage: (message: Msg, streamSeq: number) => void;
  readonly #requests = new Set<Subscription>();
  readonly #heartbeat: ReturnType<typeof setInterval>;
  #end!: (end: PullEnd) => void;
  #fail!: (err: Error) => void;
  #ended = false;
  /**
   * Beats, not a timestamp: after the event loop was blocked the timer may run
   * before the socket is read, and one beat of grace keeps that from looking silent.
   */
  #heard = true;
  #silentBeats = 0;
  /** The consumer's sequence of the last message delivered: each next one is this plus one. */
  #consumerSeq = 0;

  constructor(options: CreditedPullOptions, onMessage: (message: Msg, streamSeq: number) => void) {
    this.#options = options;
    this.#onMessage = onMessage;
    this.done = new Promise((resolve, reject) => {
      this.#end = resolve;
      this.#fail = reject;
    });
    this.#heartbeat = setInterval(() => this.#checkHeard(), options.heartbeatMs);
    this.#heartbeat.unref();
    for (let i = 0; i < OUTSTANDING; i++) this.#request();
  }

  stop(): void {
    this.#finish(() => this.#end('stopped'));
  }

  #request(): void {
    const { nc, stream, consumer, maxBytes, heartbeatMs } = this.#options;
    let left = BATCH;
    const inbox = createInbox();
    const sub = nc.subscribe(inbox, {
      callback: (err, m) => {
        if (this.#ended) return;
        if (err) return this.#finish(() => this.#fail(err));
        this.#heard = true;
        // A stored message comes with its ack subject; the server's status answers come without one
        // (their headers are read only then: decoding a stored message's headers is wasted work).
        const seqs = deliveredSeqs(m.reply);
        if (!seqs) return this.#status(sub, m);
        if (seqs.consumerSeq !== this.#consumerSeq + 1) return this.#finish(() => this.#end('gap'));
        this.#consumerSeq = seqs.consumerSeq;
        try {
          this.#onMessage(m, seqs.streamSeq);
        } catch (thrown) {
          return this.#finish(() => this.#fail(thrown instanceof Error ? thrown : new Error(String(thrown))));
        }
        if (--left === 0) this.#replace(sub);
      },
    });
    this.#requests.add(sub);
    const ask = {
      batch: BATCH,
      max_bytes: maxBytes,
      expires: EXPIRES_MS * NANOS_PER_MS,
      idle_heartbeat: heartbeatMs * NANOS_PER_MS,
    };
    nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`, JSON.stringify(ask), { reply: inbox });
  }

  /** An answer of the server to one request: a heartbeat, the request's end, or a refusal. */
  #status(sub: Subscription, m: Msg): void {
    const status = m.headers?.code ?? 0;
    if (status === 100) return; // idle heartbeat
    if (status === 408 || (status === 409 && m.headers?.description === 'Message Size Exceeds MaxBytes')) {
      return this.#replace(sub);
    }
    // No status and no ack subject: not a message this pull can place, so it starts again where it was.
    if (status === 0) return this.#finish(() => this.#end('gap'));
    const why = `${status} ${m.headers?.description ?? ''}`.trim();
    this.#finish(() => this.#fail(new Error(`the follow's pull was refused: ${why}`)));
  }

  /** A request ended on the server: its inbox goes, and a new request joins the queue. */
  #replace(sub: Subscription): void {
    sub.unsubscribe();
    this.#requests.delete(sub);
    if (!this.#ended) this.#request();
  }

  #checkHeard(): void {
    if (this.#heard) {
      this.#heard = false;
      this.#silentBeats = 0;
    } else if (++this.#silentBeats >= 2) this.#finish(() => this.#end('silent'));
  }

  #finish(settle: () => void): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#heartbeat);
    for (const sub of this.#requests) sub.unsubscribe();
    this.#requests.clear();
    settle();
  }
}

/**
 * The stream and consumer sequences a JetStream message's reply subject
 * carries: `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`
 * (nats-server 2.9), or the same after a domain and an account hash (2.10 and later).
 */
export function deliveredSeqs(reply: string | undefined): { streamSeq: number; consumerSeq: number } | null {
  if (reply === undefined || !reply.startsWith('$JS.ACK.')) return null;
  // Token by token rather than split('.'): this runs once per message the follow receives.
  const dots: number[] = [];
  for (let at = reply.indexOf('.'); at >= 0 && dots.length < 12; at = reply.indexOf('.', at + 1)) dots.push(at);
  const tokens = dots.length + 1;
  const first = tokens === 9 ? 5 : tokens >= 11 ? 7 : -1;
  if (first < 0) return null;
  const streamSeq = Number(reply.slice(dots[first - 1]! + 1, dots[first]));
  const consumerSeq = Number(reply.slice(dots[first]! + 1, dots[first + 1]));
  return Number.isSafeInteger(streamSeq) && Number.isSafeInteger(consumerSeq) ? { streamSeq, consumerSeq } : null;
}
