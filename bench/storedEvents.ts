// A conversation's stored events read over REST, for the benches that drive a
// Tether server with ws clients: the cursor to start them from, and the check
// that each client got exactly what the log holds. The REST call itself is the
// caller's (the in-process servers name the user in a header, `tether serve`
// takes a token).
import { performance } from 'node:perf_hooks';
import type { Frame } from './clientFleet.ts';

/** A GET of a JSON REST route as the conversation's user; throws on a non-2xx answer. */
export type GetJson = <T>(path: string) => Promise<T>;

export interface EventsPage {
  items: Array<{ seq: number; event: unknown }>;
  has_more: boolean;
}

/**
 * Waits until a new conversation's start-up is fully stored (its last event is
 * the state fact `awaiting_user_input`, which lands just after the actor moved
 * there) and returns that event's seq: the clients' starting cursor.
 */
export async function settledSeq(get: GetJson, id: string, deadline: number): Promise<number> {
  for (;;) {
    const info = await get<{ state: string; last_seq: number }>(`/api/conversations/${id}`);
    if (info.state === 'awaiting_user_input') {
      const last = await get<EventsPage>(`/api/conversations/${id}/events?after_seq=${info.last_seq - 1}&limit=1`);
      const event = last.items[0]?.event as { type?: string; data?: { state?: string } } | undefined;
      if (event?.type === 'agent_state_changed' && event.data?.state === 'awaiting_user_input') return info.last_seq;
    }
    if (performance.now() > deadline) throw new Error(`conversation ${id} is still ${info.state} after start-up`);
    // Not faster: a hundred conversations polled every few ms would slow the start-up being waited for.
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Every stored event of the conversation after the cursor, page by page. */
export async function restEvents(get: GetJson, id: string, afterSeq: number): Promise<EventsPage['items']> {
  const items: EventsPage['items'] = [];
  let cursor = afterSeq;
  for (;;) {
    const page = await get<EventsPage>(`/api/conversations/${id}/events?after_seq=${cursor}&limit=1000`);
    items.push(...page.items);
    if (!page.has_more || page.items.length === 0) return items;
    cursor = page.items[page.items.length - 1]!.seq;
  }
}

/** Every stored event after the cursor reached the client once, in order, with the same bytes. */
export function verifyFrames(id: string, stored: EventsPage['items'], got: readonly Frame[]): void {
  if (got.length !== stored.length) {
    throw new Error(`conversation ${id}: ${stored.length} events stored but ${got.length} event frames received`);
  }
  stored.forEach((item, i) => {
    const [seq, eventJson] = got[i]!;
    if (seq !== item.seq) throw new Error(`conversation ${id}: frame ${i} has seq ${seq}, the log has ${item.seq}`);
    if (eventJson !== JSON.stringify(item.event))
      throw new Error(`conversation ${id}: event at seq ${item.seq} differs from the log`);
  });
}
