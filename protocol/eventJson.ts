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

const decoder = new TextDecoder();

/**
 * A stored event from the bytes the log holds, remembered with them: frames of
 * an event that came from the log are built from its stored bytes, not from a
 * second serialisation (and so are byte-equal on every node). `bytes` must not
 * change afterwards: pass a copy of a buffer that will be reused.
 */
export function parseStoredEvent(bytes: Uint8Array): StoredEvent {
  const event = JSON.parse(decoder.decode(bytes)) as StoredEvent;
  cache.set(event, bytes);
  return event;
}
