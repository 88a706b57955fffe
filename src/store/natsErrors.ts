import { errors } from '@nats-io/transport-node';
import { StoreUnavailableError } from './errors.ts';

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
const UNAVAILABLE_NAMES = new Set(['JetStreamNotEnabled']);

export function isUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return UNAVAILABLE.some((type) => err instanceof type) || UNAVAILABLE_NAMES.has(err.name);
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
