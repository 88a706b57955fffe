import type { StoredEvent } from './event.ts';

const cache = new WeakMap<StoredEvent, string>();

/**
 * The JSON text of a stored event, made once per event object: the log stores
 * these bytes and every WebSocket frame of the event carries the same bytes.
 * Events are never mutated after they are stamped, which is what makes this safe.
 */
export function eventJson(event: StoredEvent): string {
  let text = cache.get(event);
  if (text === undefined) {
    text = JSON.stringify(event);
    cache.set(event, text);
  }
  return text;
}
