import {
  createInbox,
  headers,
  nuid,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from '@nats-io/transport-node';
import { StoreUnavailableError } from './errors.ts';

/** The server's answer to a JetStream publish. */
export type PubAck =
  | { ok: true; seq: number; duplicate: boolean }
  | {
      ok: false;
      code: number;
      errCode: number;
      description: string;
      /** It was sent more than once, with this `Nats-Msg-Id`: an earlier send may be the one stored. */
      resentAs?: string;
    };

export interface PublishOptions {
  /** `Nats-Expected-Last-Subject-Sequence`. */
  expectedLastSubjectSeq: number;
  /** `Nats-Msg-Id`. */
  msgId?: string;
}

/** How long to wait before sending again a publish that no stream took (503). */
const UNAVAILABLE_RETRY_MS = 100;
/**
 * A publish with no answer this long is sent again, then after twice as long,
 * and so on within its deadline: one that reached a stream as its leader moved
 * (a step-down, a server stopping) may be answered by no one. nats.js never
 * sends a request again; raw publishers through the rolling restart of
 * test/e2e/rollingRestart.cluster.test.ts waited out their whole timeout.
 */
const SILENT_RESEND_MS = 500;
/** How often what is pending is looked at (silent ones sent again, expired ones failed). */
const SWEEP_MS = 100;

interface Pending {
  resolve: (ack: PubAck) => void;
  reject: (err: Error) => void;
  deadline: number;
  /** What was published, to send again on a new connection. */
  subject: string;
  payload: Uint8Array;
  headers: MsgHdrs;
  /** Times it was sent: after the first, a duplicate ack is the answer to an earlier send of ours. */
  sends: number;
  /** When it is sent again if no answer came by then. */
  resendAt: number;
  /** How long the next wait for an answer is before that. */
  silentMs: number;
}

/**
 * JetStream publish on one reply subscription. A JetStream publish is a core
 * request whose reply is a JSON PubAck; nats.js's request machinery builds a
 * timer and two Error objects (with stack traces) per request, which was the
 * largest single cost of the append path. Here a reply is a map lookup, and one
 * sweep fails what has waited too long: StoreUnavailableError, the event may or
 * may not be stored (retry with its msgId).
 *
 * Every publish carries a `Nats-Msg-Id` (the caller's, else one of ours), so that
 * what was in flight when the connection dropped is sent again as soon as nats.js
 * is connected again, to whichever server: the one that went may have stored it,
 * or not, or its ack was lost on the way; the stream's dedupe keeps it once.
 * Without this an append in flight during a nats-server's restart waited out the
 * whole timeout, and its session was closed. One with no answer for half a
 * second is sent again too, with the connection up (SILENT_RESEND_MS).
 */
export class JetStreamPublisher {
  readonly #nc: NatsConnection;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #pending = new Map<string, Pending>();
  readonly #sub: Subscription;
  readonly #sweeper: NodeJS.Timeout;
  /** Our own message ids: unique to this publisher, so that a duplicate can only be a send again of ours. */
  readonly #idPrefix = `tether-${nuid.next()}-`;
  #next = 0;

  constructor(nc: NatsConnection, options: { timeoutMs?: number } = {}) {
    this.#nc = nc;
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#prefix = `${createInbox()}.`;
    this.#sub = nc.subscribe(`${this.#prefix}*`, { callback: (err, msg) => this.#reply(err, msg) });
    this.#sweeper = setInterval(() => this.#sweep(Date.now()), Math.min(SWEEP_MS, this.#timeoutMs));
    this.#sweeper.unref();
    void nc.closed().then(() => this.close());
    void this.#resendOnReconnect();
  }

  publish(subject: string, payload: Uint8Array, options: PublishOptions): Promise<PubAck> {
    const n = (this.#next++).toString(36);
    const reply = this.#prefix + n;
    const h = headers();
    h.set('Nats-Expected-Last-Subject-Sequence', String(options.expectedLastSubjectSeq));
    h.set('Nats-Msg-Id', options.msgId ?? this.#idPrefix + n);
    return new Promise<PubAck>((resolve, reject) => {
      const now = Date.now();
      const [deadline, resendAt, silentMs] = [now + this.#timeoutMs, now + SILENT_RESEND_MS, SILENT_RESEND_MS * 2];
      this.#pending.set(reply, {
        resolve,
        reject,
        deadline,
        subject,
        payload,
        headers: h,
        sends: 1,
        resendAt,
        silentMs,
      });
      try {
        this.#nc.publish(subject, payload, { reply, headers: h });
      } catch (err) {
        this.#pending.delete(reply);
        reject(new StoreUnavailableError(`NATS refused the publish: ${(err as Error).message}`, { cause: err }));
      }
    });
  }

  close(): void {
    clearInterval(this.#sweeper);
    this.#sub.unsubscribe();
    this.#sweep(Number.POSITIVE_INFINITY);
  }

  #reply(err: Error | null, msg: Msg): void {
    const pending = this.#pending.get(msg?.subject);
    if (!pending) return;
    this.#pending.delete(msg.subject);
    if (err)
      return pending.reject(new StoreUnavailableError(`NATS subscription failed: ${err.message}`, { cause: err }));
    // A status reply (503: no responders) means no stream listens on the subject.
    if (msg.headers?.hasError) {
      const why = `JetStream did not take the event (${msg.headers.code} ${msg.headers.description})`;
      return msg.headers.code === 503
        ? this.#again(msg.subject, pending, why)
        : pending.reject(new StoreUnavailableError(why));
    }
    let ack: { seq?: number; duplicate?: boolean; error?: { code: number; err_code: number; description: string } };
    try {
      ack = msg.json();
    } catch (cause) {
      return pending.reject(
        new StoreUnavailableError('JetStream answered a publish with something that is not JSON', { cause }),
      );
    }
    // 503 (10008): the stream is between leaders.
    if (ack.error?.code === 503) return this.#again(msg.subject, pending, ack.error.description);
    if (ack.error) {
      pending.resolve({
        ok: false,
        code: ack.error.code,
        errCode: ack.error.err_code,
        description: ack.error.description,
        ...(pending.sends > 1 && { resentAs: pending.headers.get('Nats-Msg-Id') }),
      });
    } else if (typeof ack.seq === 'number') {
      // Sent more than once, a duplicate is our own first send, stored: not a caller's earlier attempt.
      pending.resolve({ ok: true, seq: ack.seq, duplicate: ack.duplicate === true && pending.sends === 1 });
    } else {
      pending.reject(new StoreUnavailableError('JetStream answered a publish without a sequence'));
    }
  }

  /**
   * No stream took it for now: its leader is moving, or this server's JetStream
   * is still starting. Sent again shortly while its deadline allows (the msg id
   * keeps it once), so that a leader election is a pause, not a failure.
   */
  #again(reply: string, pending: Pending, why: string): void {
    if (Date.now() + UNAVAILABLE_RETRY_MS >= pending.deadline) return pending.reject(new StoreUnavailableError(why));
    // Sent again by the timer below, not by the sweep meanwhile.
    pending.resendAt = Number.POSITIVE_INFINITY;
    this.#pending.set(reply, pending);
    setTimeout(() => {
      if (this.#pending.get(reply) === pending) this.#sendAgain(reply, pending);
    }, UNAVAILABLE_RETRY_MS).unref();
  }

  /** On each reconnection, sends again everything not acknowledged yet, with a new deadline. */
  async #resendOnReconnect(): Promise<void> {
    for await (const status of this.#nc.status()) {
      if (status.type !== 'reconnect') continue;
      const deadline = Date.now() + this.#timeoutMs;
      for (const [reply, pending] of this.#pending) {
        pending.deadline = deadline;
        pending.silentMs = SILENT_RESEND_MS;
        this.#sendAgain(reply, pending);
      }
    }
  }

  /** The same message, headers and reply subject once more (its msg id keeps it stored once). */
  #sendAgain(reply: string, pending: Pending): void {
    pending.sends += 1;
    pending.resendAt = Date.now() + pending.silentMs;
    pending.silentMs *= 2;
    try {
      this.#nc.publish(pending.subject, pending.payload, { reply, headers: pending.headers });
    } catch {
      // Closed meanwhile: close() fails it.
    }
  }

  #sweep(now: number): void {
    for (const [reply, pending] of this.#pending) {
      if (pending.deadline > now) {
        if (pending.resendAt <= now) this.#sendAgain(reply, pending);
        continue;
      }
      this.#pending.delete(reply);
      pending.reject(
        new StoreUnavailableError(
          now === Number.POSITIVE_INFINITY
            ? 'the NATS connection closed before JetStream acknowledged the event'
            : `JetStream did not acknowledge the event within ${this.#timeoutMs} ms; it may or may not be stored`,
        ),
      );
    }
  }
}
