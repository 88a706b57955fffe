import { errors } from '@nats-io/transport-node';
import { JetStreamApiError } from '@nats-io/jetstream';
import { StoreSettingsError, StoreUnavailableError } from './errors.ts';

// Errors that mean "NATS did not answer": the connection is down, closed,
// draining, the request timed out, or nobody serves the JetStream API.
const UNAVAILABLE: ReadonlyArray<new (...args: never[]) => Error> = [
  errors.TimeoutError,
  errors.ClosedConnectionError,
  errors.DrainingConnectionError,
  errors.ConnectionError,
  errors.NoRespondersError,
  errors.RequestError,
];

export function isUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return noLeaderNow(err) || UNAVAILABLE.some((type) => err instanceof type);
}

/** A request that got no answer in its time (nats.js throws it bare, or as a RequestError's cause). */
export function isTimeout(err: unknown): boolean {
  return (
    err instanceof errors.TimeoutError ||
    (err instanceof errors.RequestError && err.cause instanceof errors.TimeoutError)
  );
}

/**
 * NATS said, for certain, that nothing was done, and only for now: no stream
 * listened on the subject (its leader moving, a replica rejoining after a
 * restart: nats.js says "jetstream is not enabled"), or JetStream was between
 * leaders (10008). Not a timeout: a write may have been applied then.
 */
export function noLeaderNow(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'JetStreamNotEnabled' || err instanceof errors.NoRespondersError) return true;
  return err instanceof JetStreamApiError && err.code === 10008;
}

/**
 * Translates a driver error where it enters the store: connection loss and
 * timeouts become StoreUnavailableError, anything else is returned unchanged.
 */
export function toStoreError(err: unknown, doing: string): unknown {
  if (err instanceof StoreUnavailableError || !isUnavailable(err)) return err;
  const reason = err instanceof Error ? err.message : String(err);
  return new StoreUnavailableError(`NATS unavailable while ${doing}: ${reason}`, { cause: err });
}

/**
 * Whether a failure to open the stores may pass by itself while NATS starts:
 * no answer yet, no JetStream meta leader (10008), or too few servers joined
 * for the replicas (10023), a stream not there yet (10059) after its creation timed
 * out, heartbeats of another lease that may age out.
 * Not a server without JetStream, nor settings a single server refuses.
 */
export function passesWithTime(err: unknown): boolean {
  if (err instanceof StoreUnavailableError) {
    return !(err.cause instanceof Error && err.cause.name === 'JetStreamNotEnabled');
  }
  if (err instanceof StoreSettingsError && err.waitable) return true;
  const cause = err instanceof StoreSettingsError ? err.cause : err;
  // 10059: a stream whose creation timed out on a forming cluster may not be there yet, or half made.
  return cause instanceof JetStreamApiError && [10023, 10008, 10059].includes(cause.code);
}
