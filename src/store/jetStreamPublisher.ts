import { createInbox, headers, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { StoreUnavailableError } from './errors.ts';

/** The server's answer to a JetStream publish. */
export type PubAck =
  { ok: true; seq: number; duplicate: boolean } | { ok: false; code: number; errCode: number; description: string };

export interface PublishOptions {
  /** `Nats-Expected-Last-Subject-Sequence`. */
  expectedLastSubjectSeq: number;
  /** `Nats-Msg-Id`. */
  msgId?: string;
}

interface Pending {
  resolve: (ack: PubAck) => void;
  reject: (err: Error) => void;
  deadline: number;
}

/**
 * JetStream publish on one reply subscription. A JetStream publish is a core
 * request whose reply is a JSON PubAck; nats.js's request machinery builds a
 * timer and two Error objects (with stack traces) per request, which was the
 * largest single cost of the append path. Here a reply is a map lookup, and one
 * sweep fails what has waited too long: StoreUnavailableError, the event may or
 * may not be stored (retry with its msgId).
 */
export class JetStreamPublisher {
  readonly #nc: NatsConnection;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #pending = new Map<string, Pending>();
  readonly #sub: Subscription;
  readonly #sweeper: NodeJS.Timeout;
  #next = 0;

  constructor(nc: NatsConnection, options: { timeoutMs?: number } = {}) {
    this.#nc = nc;
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#prefix = `${createInbox()}.`;
    this.#sub = nc.subscribe(`${this.#prefix}*`, { callback: (err, msg) => this.#reply(err, msg) });
    this.#sweeper = setInterval(() => this.#sweep(Date.now()), Math.min(1_000, this.#timeoutMs));
    this.#sweeper.unref();
    void nc.closed().then(() => this.close());
  }

  publish(subject: string, payload: Uint8Array, options: PublishOptions): Promise<PubAck> {
    const reply = this.#prefix + (this.#next++).toString(36);
    const h = headers();
    h.set('Nats-Expected-Last-Subject-Sequence', String(options.expectedLastSubjectSeq));
    if (options.msgId !== undefined) h.set('Nats-Msg-Id', options.msgId);
    return new Promise<PubAck>((resolve, reject) => {
      this.#pending.set(reply, { resolve, reject, deadline: Date.now() + this.#timeoutMs });
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
      return pending.reject(
        new StoreUnavailableError(`JetStream did not take the event (${msg.headers.code} ${msg.headers.description})`),
      );
    }
    let ack: { seq?: number; duplicate?: boolean; error?: { code: number; err_code: number; description: string } };
    try {
      ack = msg.json();
    } catch (cause) {
      return pending.reject(
        new StoreUnavailableError('JetStream answered a publish with something that is not JSON', { cause }),
      );
    }
    if (ack.error) {
      pending.resolve({
        ok: false,
        code: ack.error.code,
        errCode: ack.error.err_code,
        description: ack.error.description,
      });
    } else if (typeof ack.seq === 'number') {
      pending.resolve({ ok: true, seq: ack.seq, duplicate: ack.duplicate === true });
    } else {
      pending.reject(new StoreUnavailableError('JetStream answered a publish without a sequence'));
    }
  }

  #sweep(now: number): void {
    for (const [reply, pending] of this.#pending) {
      if (pending.deadline > now) continue;
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
