import { errors } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';
import { firstAnswer, type AttemptSchedule } from './firstAnswer.ts';
import { isTimeout, noLeaderNow } from './natsErrors.ts';

/** How often, and for how long at most, an operation that met a moment without a stream leader is tried again. */
const RETRY_EVERY_MS = 100;
const RETRY_FOR_MS = 3_000;
/**
 * A repeatable operation with no answer for half a second is made again while
 * the first still waits, then a second and two later: a write that reached a
 * stream as its leader moved (a step-down before a server's restart) may be
 * answered by no one, and nats.js waits out its 5 s timeout. The conversation
 * index's write did, and held its session's answer that long. (Each attempt
 * waits as long as the bucket's requests do: `timeoutsMs` is not used.)
 */
export const SILENT: AttemptSchedule = { everyMs: [500, 1_000], timeoutsMs: [0], attempts: 4 };

/** Operations that change nothing when they fail this way, so that trying again is safe. */
const RETRIED = new Set(['get', 'put', 'create', 'update', 'delete', 'purge']);
/** Those that may be done twice: a read, or a write that does not expect a revision (`previousSeq`). */
const REPEATABLE = new Set(['get', 'put', 'delete', 'purge']);
const repeatable = (operation: string, args: unknown[]) =>
  REPEATABLE.has(operation) && (args[1] as { previousSeq?: number } | undefined)?.previousSeq === undefined;

/**
 * Whether the operation may be tried again: NATS said nothing was done, for
 * now (noLeaderNow), or the connection dropped before the answer
 * (natsConnection.ts) and doing it twice changes nothing more than once.
 */
function passesSoon(err: unknown, repeatable: boolean): boolean {
  return noLeaderNow(err) || (repeatable && err instanceof errors.RequestError);
}

/**
 * The bucket, with each read and write tried again every 100 ms, for up to
 * 3 s, while NATS answers that it cannot serve it for now. A nats-server 2.9
 * restarted in a cluster makes its streams elect again as it rejoins: without
 * this, every conversation's next write failed for the second that took. A
 * read, or a write that expects no revision, is also made again when it gets
 * no answer (SILENT).
 */
export function retryingKv(kv: KV): KV {
  return new Proxy(kv, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof property !== 'string' || !RETRIED.has(property) || typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const once = () => value.apply(target, args) as Promise<unknown>;
        if (!repeatable(property, args)) return tryWhileUnavailable(false, once);
        return tryWhileUnavailable(true, () => firstAnswer(once, SILENT, { lost: isTimeout, drop: () => undefined }));
      };
    },
  });
}

async function tryWhileUnavailable<T>(repeatable: boolean, attempt: () => Promise<T>): Promise<T> {
  const until = Date.now() + RETRY_FOR_MS;
  for (;;) {
    try {
      return await attempt();
    } catch (err) {
      if (!passesSoon(err, repeatable) || Date.now() + RETRY_EVERY_MS > until) throw err;
      await new Promise((resolve) => setTimeout(resolve, RETRY_EVERY_MS));
    }
  }
}
