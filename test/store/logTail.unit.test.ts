import { describe, expect, test } from 'vitest';
import { eventBytes, type LoggedEvent } from '../../protocol/index.ts';
import { DEFAULT_TAIL_LIMITS, LogTail } from '../../src/store/logTail.ts';
import { lossy } from '../support/lossyFollow.ts';
import { appendMany, collector, message, newConversationId } from './eventLogContract.ts';

const logged = (c: string, id: number, seq: number): LoggedEvent => ({ seq, event: message(c, id) });
const ids = (items: readonly LoggedEvent[]) => items.map((e) => e.event.id);

/** A subscriber that goes live at `afterSeq` and leaves: the room keeps a tail from there. */
async function visit(subscriptions: ReturnType<typeof lossy>['subscriptions'], c: string, afterSeq = 0) {
  const got = collector();
  const subscription = subscriptions.subscribe(c, afterSeq, got);
  await subscription.caughtUp;
  subscription.close();
  return got;
}

describe('a conversation’s tail', () => {
  test('holds every event after its start, in order, and says the id at a cursor', () => {
    const c = newConversationId();
    const tail = new LogTail(10, 4, DEFAULT_TAIL_LIMITS);
    for (const [i, seq] of [12, 15, 16].entries()) expect(tail.push(logged(c, 5 + i, seq))).toBeGreaterThan(0);
    expect(tail.after(9, 100)).toBeUndefined();
    expect(tail.after(10, 100)).toMatchObject({ hasMore: false, idAtCursor: 4 });
    expect(ids(tail.after(10, 100)!.items)).toEqual([5, 6, 7]);
    expect(tail.after(13, 100)).toMatchObject({ idAtCursor: 5 });
    expect(ids(tail.after(13, 100)!.items)).toEqual([6, 7]);
    expect(tail.after(10, 2)).toMatchObject({ hasMore: true });
    expect(tail.after(16, 100)).toEqual({ items: [], hasMore: false, idAtCursor: 7 });
    // Delivered again (a follow that started over): ignored.
    expect(tail.push(logged(c, 7, 16))).toBe(0);
  });

  test('an event whose id is not the next ends it', () => {
    const c = newConversationId();
    const tail = new LogTail(0, -1, DEFAULT_TAIL_LIMITS);
    tail.push(logged(c, 0, 1));
    expect(tail.push(logged(c, 2, 3))).toBeUndefined();
  });

  test('past its bounds in events or bytes the oldest go, and a cursor before them is not served', () => {
    const c = newConversationId();
    const size = eventBytes(message(c, 0)).length;
    const tail = new LogTail(0, -1, { ...DEFAULT_TAIL_LIMITS, events: 3 });
    for (let id = 0; id < 5; id++) tail.push(logged(c, id, id + 1));
    expect(tail.after(1, 100)).toBeUndefined();
    expect(ids(tail.after(2, 100)!.items)).toEqual([2, 3, 4]);
    expect(tail.after(2, 100)!.idAtCursor).toBe(1);
    const small = new LogTail(0, -1, { ...DEFAULT_TAIL_LIMITS, bytes: size * 2 + 1 });
    for (let id = 0; id < 5; id++) small.push(logged(c, id, id + 1));
    expect(small.bytes).toBeLessThanOrEqual(size * 2 + 1);
    expect(ids(small.after(3, 100)!.items)).toEqual([3, 4]);
  });
});

describe('a resume served from the tail', () => {
  test('a subscriber back within the time kept is caught up from memory: no read, every event once, in order', async () => {
    const { log, subscriptions, reads } = lossy(() => false);
    const c = newConversationId();
    const first = await visit(subscriptions, c);
    expect(first.items).toEqual([]);
    const seqs = await appendMany(log, c, 30);
    const before = reads();
    const got = collector();
    const subscription = subscriptions.subscribe(c, seqs[9]!, got);
    await subscription.caughtUp;
    expect(reads()).toBe(before);
    expect(got.items.map((e) => e.seq)).toEqual(seqs.slice(10));
    // And on live, through the seam.
    await appendMany(log, c, 2, 30);
    await got.until(22);
    expect(ids(got.items)).toEqual([...Array(22).keys()].map((i) => i + 10));
    expect(got.items).toEqual((await log.read(c, { afterSeq: seqs[9]! })).items);
    subscription.close();
    await subscriptions.stop();
  });

  test('events appended while a subscriber catches up from the tail at its own pace come once, in order', async () => {
    const { log, subscriptions, reads } = lossy(() => false);
    const c = newConversationId();
    await visit(subscriptions, c);
    await appendMany(log, c, 2_500);
    const before = reads();
    let appending: Promise<number[]> | undefined;
    const got = collector((item) => {
      // A slow client: each event waits a tick, and more are stored meanwhile.
      if (item.event.id === 100) appending = appendMany(log, c, 50, 2_500);
      return new Promise((resolve) => setImmediate(resolve));
    });
    const subscription = subscriptions.subscribe(c, 0, got);
    await subscription.caughtUp;
    await appending;
    await got.until(2_550);
    expect(reads()).toBe(before);
    expect(ids(got.items)).toEqual([...Array(2_550).keys()]);
    subscription.close();
    await subscriptions.stop();
  });

  test('a cursor the tail no longer covers is caught up from the log', async () => {
    const { log, subscriptions, reads } = lossy(() => false, { tail: { events: 10 } });
    const c = newConversationId();
    await visit(subscriptions, c);
    const seqs = await appendMany(log, c, 30);
    const before = reads();
    const got = collector();
    const subscription = subscriptions.subscribe(c, seqs[4]!, got);
    await subscription.caughtUp;
    expect(reads()).toBeGreaterThan(before);
    expect(got.items.map((e) => e.seq)).toEqual(seqs.slice(5));
    subscription.close();
    await subscriptions.stop();
  });

  test('an event the follow skipped ends the tail: the next resume reads the log and misses nothing', async () => {
    const { log, subscriptions, reads, stops } = lossy(({ event }) => event.id === 3);
    const c = newConversationId();
    await visit(subscriptions, c);
    const seqs = await appendMany(log, c, 8);
    // Kept only for its tail, the conversation is no longer followed once the tail ends.
    expect(stops()).toBe(1);
    const before = reads();
    const got = collector();
    const subscription = subscriptions.subscribe(c, 0, got);
    await subscription.caughtUp;
    expect(reads()).toBeGreaterThan(before);
    expect(got.items.map((e) => e.seq)).toEqual(seqs);
    subscription.close();
    await subscriptions.stop();
  });

  test('past the bytes for all tails the least recently subscribed one goes first', async () => {
    const [a, b] = [newConversationId(), newConversationId()];
    const size = eventBytes(message(a, 0)).length;
    const { log, subscriptions, reads } = lossy(() => false, { tail: { totalBytes: size * 15 } });
    await visit(subscriptions, a);
    await visit(subscriptions, b);
    await appendMany(log, a, 10);
    await appendMany(log, b, 10);
    let before = reads();
    await visit(subscriptions, b);
    expect(reads()).toBe(before);
    before = reads();
    const got = await visit(subscriptions, a);
    expect(reads()).toBeGreaterThan(before);
    expect(ids(got.items)).toEqual([...Array(10).keys()]);
    await subscriptions.stop();
  });

  test('the follow runs on for the time kept after the last subscriber left, then stops; a purge forgets the tail', async () => {
    const { log, subscriptions, stops, reads } = lossy(() => false, { tail: { keepMs: 100 } });
    const c = newConversationId();
    await visit(subscriptions, c);
    expect(stops()).toBe(0);
    await appendMany(log, c, 3);
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(stops()).toBe(1);
    let before = reads();
    await visit(subscriptions, c);
    expect(reads()).toBeGreaterThan(before);
    await log.purge(c);
    subscriptions.forget(c);
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(stops()).toBe(2);
    before = reads();
    expect((await visit(subscriptions, c)).items).toEqual([]);
    expect(reads()).toBeGreaterThan(before);
    await subscriptions.stop();
  });

  test('with no bytes for tails nothing is kept: every resume reads the log and the follow stops at once', async () => {
    const { log, subscriptions, stops, reads } = lossy(() => false, { tail: { totalBytes: 0 } });
    const c = newConversationId();
    await visit(subscriptions, c);
    expect(stops()).toBe(1);
    await appendMany(log, c, 3);
    const before = reads();
    expect(ids((await visit(subscriptions, c)).items)).toEqual([0, 1, 2]);
    expect(reads()).toBeGreaterThan(before);
    await subscriptions.stop();
  });
});
