import type { StoredEvent } from './event.ts';

const cache = new WeakMap<StoredEvent, Buffer>();

/**
 * The JSON of a stored event as UTF-8 bytes, made once per event object: the
 * log stores these bytes and every WebSocket frame of the event is built from
 * them, so a large event (a command's output) is not serialised or encoded
 * again per use. Events are never mutated after they are stamped, which is
 * what makes this safe.
 */
export function eventBytes(event: StoredEvent): Buffer {
  let bytes = cache.get(event);
  if (bytes === undefined) {
    bytes = Buffer.from(JSON.stringify(event));
    cache.set(event, bytes);
  }
  return bytes;
}
