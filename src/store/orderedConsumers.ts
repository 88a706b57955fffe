import type { NatsConnection } from '@nats-io/transport-node';
import { jetstream, type Consumer, type JetStreamClient, type OrderedConsumerOptions } from '@nats-io/jetstream';
import { firstAnswer, type AttemptSchedule } from './firstAnswer.ts';
import { isTimeout } from './natsErrors.ts';

// nats-server 2.9 places a new consumer of a replicated stream on one of the stream's
// servers, and learns late that one is gone: a consumer placed on a killed server is
// never made, and its creation waits out the request's timeout (a third of creations
// for a minute and more after a kill -9; all of them for the few seconds the stream
// elects a new leader). Each attempt is placed anew, so one starts every second while
// those before still wait, and their waits grow (a busy but live server gets its time).
// Attempts that each waited for the one before to time out had grown to 4 and 8 s by
// the time the stream had a leader again: one or two lost on the killed server kept
// a node's live feed, or a rehydration's read, waiting up to 24 s when a new attempt
// would have been answered at once. The first few start a quarter of a second apart:
// right after a stream's leader moved (a step-down before a server's restart), a
// first creation is often lost and the next answered at once, and every client of
// the node waits for the follow's consumer. The last starts after 15 s and ends by
// 23 s, as the 5 s default did 5 times.
const CREATION: AttemptSchedule = {
  everyMs: [250, 250, 500, 1_000],
  timeoutsMs: [500, 500, 1_000, 1_000, 2_000, 2_000, 4_000, 4_000, 8_000],
  attempts: 18,
};

/** Makes the ordered consumers every read uses, with overlapping attempts while creations time out. */
export class OrderedConsumers {
  readonly #nc: NatsConnection;
  /** One client per attempt timeout. */
  readonly #clients = new Map<number, JetStreamClient>();

  constructor(nc: NatsConnection) {
    this.#nc = nc;
  }

  /** `cancelled` is asked before each attempt after the first: a follow that stops does not wait out the rest. */
  get(stream: string, options: Partial<OrderedConsumerOptions>, cancelled = () => false): Promise<Consumer> {
    return firstAnswer(
      // A copy: nats.js writes its name prefix into the options it is given.
      (timeoutMs) => this.#client(timeoutMs).consumers.get(stream, { ...options }),
      CREATION,
      {
        lost: isTimeout,
        // A creation answered after another: made on the server, used by nobody.
        drop: (late) => void late.delete().catch(() => undefined),
        cancelled,
      },
    );
  }

  #client(timeoutMs: number): JetStreamClient {
    let js = this.#clients.get(timeoutMs);
    if (!js) {
      js = jetstream(this.#nc, { timeout: timeoutMs });
      this.#clients.set(timeoutMs, js);
    }
    return js;
  }
}
