import type { StoredEvent } from './event.ts';

const cache = new WeakMap<StoredEvent, Uint8Array>();
// TextEncoder, not Node's Buffer: this folder is loaded by browser pages too.
const encoder = new TextEncoder();

/**
 * The JSON of a stored event as UTF-8 bytes, made once per event object: the
 * log stores these bytes and every WebSocket frame of the event is built from
 * them, so a large event (a command's output) is not serialised or encoded
 * again per use. Events are never mutated after they are stamped, which is
 * what makes this safe.
 */
export function eventBytes(event: StoredEvent): Uint8Array {
  let bytes = cache.get(event);
  if (bytes === undefined) {
    bytes = encoder.encode(JSON.stringify(event));
    cache.set(event, bytes);
  }
  return bytes;
}
