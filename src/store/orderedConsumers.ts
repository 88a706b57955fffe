import { errors, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, type Consumer, type JetStreamClient, type OrderedConsumerOptions } from '@nats-io/jetstream';

// nats-server 2.9 places a new consumer of a replicated stream on one of the stream's
// servers, and learns late that one is gone: a consumer placed on a killed server is
// never made, and its creation waits out the request's timeout (a third of creations
// for a minute and more after a kill -9; all of them for the few seconds the stream
// elects a new leader). Short waits first, each attempt placed anew, then longer ones
// (a busy but live server gets its time): 23 s in all, as the 5 s default did 5 times.
const CREATE_TIMEOUTS_MS = [1_000, 1_000, 1_000, 2_000, 2_000, 4_000, 4_000, 8_000];

function isTimeout(err: unknown): boolean {
  return (
    err instanceof errors.TimeoutError ||
    (err instanceof errors.RequestError && err.cause instanceof errors.TimeoutError)
  );
}

/** Makes the ordered consumers every read uses, again when one's creation times out. */
export class OrderedConsumers {
  readonly #clients: JetStreamClient[];

  constructor(nc: NatsConnection) {
    this.#clients = CREATE_TIMEOUTS_MS.map((timeout) => jetstream(nc, { timeout }));
  }

  /** `cancelled` is asked between attempts: a follow that stops does not wait out the rest. */
  async get(stream: string, options: Partial<OrderedConsumerOptions>, cancelled = () => false): Promise<Consumer> {
    let last: unknown;
    for (const js of this.#clients) {
      if (cancelled() && last !== undefined) break;
      try {
        // A copy: nats.js writes its name prefix into the options it is given.
        return await js.consumers.get(stream, { ...options });
      } catch (err) {
        if (!isTimeout(err)) throw err;
        last = err;
      }
    }
    throw last;
  }
}
