import { describe, expect, test } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { memoryEventLog } from '../../src/store/memoryEventLog.ts';
import { LogSubscriptions } from '../../src/store/logSubscriptions.ts';
import { lossy } from '../support/lossyFollow.ts';
import { appendMany, collector, newConversationId } from './eventLogContract.ts';

describe('log subscriptions', () => {
  test('an event the follow skipped is read from the log when the next one comes: every event once, in order', async () => {
    const { log, subscriptions, dropped } = lossy(({ event }) => event.id % 3 === 1);
    const c = newConversationId();
    const got = collector();
    const subscription = subscriptions.subscribe(c, 0, got);
    await subscription.caughtUp;
    const seqs = await appendMany(log, c, 12);
    await got.until(12);
    subscription.close();
    expect(dropped.length).toBe(4);
    expect(got.items.map((e) => e.seq)).toEqual(seqs);
    expect(got.items.map((e) => e.event.id)).toEqual([...seqs.keys()]);
  });

  test('a subscription whose cursor is at the end still sees a gap in the first live event', async () => {
    const { log, subscriptions } = lossy(({ event }) => event.id === 3);
    const c = newConversationId();
    const seqs = await appendMany(log, c, 3);
    const got = collector();
    const subscription = subscriptions.subscribe(c, seqs[2]!, got);
    await subscription.caughtUp;
    seqs.push(...(await appendMany(log, c, 2, 3)));
    await got.until(2);
    subscription.close();
    expect(got.items.map((e) => e.event.id)).toEqual([3, 4]);
  });

  test('the catch-up reads while the follow starts, and an event stored before the follow was ready is not lost', async () => {
    const log = memoryEventLog();
    const c = newConversationId();
    await appendMany(log, c, 3);
    let ready = () => {};
    const following = new Promise<void>((resolve) => (ready = resolve));
    let live = false;
    let reads = 0;
    const subscriptions = new LogSubscriptions({
      read: async (id, options) => {
        const page = await log.read(id, options);
        if (++reads === 1) {
          // Stored after the first read and before the follow delivers anything: only a second read has it.
          await appendMany(log, c, 1, 3);
          live = true;
          ready();
        }
        return page;
      },
      last: (id) => log.last(id),
      follow: (handlers) => {
        const follower = log.follow({ ...handlers, event: (id, logged) => live && handlers.event(id, logged) });
        return { ready: following.then(() => follower.ready), stop: () => follower.stop() };
      },
    });
    const got = collector();
    const subscription = subscriptions.subscribe(c, 0, got);
    await subscription.caughtUp;
    expect(reads).toBeGreaterThanOrEqual(2);
    expect(got.items.map((e) => e.event.id)).toEqual([0, 1, 2, 3]);
    await appendMany(log, c, 1, 4);
    await got.until(5);
    subscription.close();
    expect(got.items.map((e) => e.event.id)).toEqual([0, 1, 2, 3, 4]);
  });

  test('once the follow is ready, a subscription catches up in one read when nothing more is stored', async () => {
    const log = memoryEventLog();
    let reads = 0;
    const subscriptions = new LogSubscriptions({
      read: (id, options) => {
        reads += 1;
        return log.read(id, options);
      },
      last: (id) => log.last(id),
      follow: (handlers) => log.follow(handlers),
    });
    const [a, b] = [newConversationId(), newConversationId()];
    const first = subscriptions.subscribe(a, 0, collector());
    await first.caughtUp;
    await appendMany(log, b, 3);
    const got = collector();
    reads = 0;
    const second = subscriptions.subscribe(b, 0, got);
    await second.caughtUp;
    expect(reads).toBe(1);
    expect(got.items.map((e) => e.event.id)).toEqual([0, 1, 2]);
    first.close();
    second.close();
  });

  test('a subscription whose read fails ends and says why; the others go on', async () => {
    const log = memoryEventLog();
    const broken = newConversationId();
    const subscriptions = new LogSubscriptions({
      read: (id, options) => (id === broken ? Promise.reject(new Error('the store is down')) : log.read(id, options)),
      last: (id) => log.last(id),
      follow: (handlers) => log.follow(handlers),
    });
    const fine = newConversationId();
    const [bad, good] = [collector(), collector()];
    subscriptions.subscribe(broken, 0, bad);
    const subscription = subscriptions.subscribe(fine, 0, good);
    await subscription.caughtUp;
    await appendMany(log, fine, 2);
    await good.until(2);
    expect(bad.failures).toEqual([new Error('the store is down')]);
    await appendMany(log, broken, 1);
    expect(bad.items).toEqual([]);
    subscription.close();
  });

  test('a subscriber that throws on a live event loses its own subscription only', async () => {
    const { log, subscriptions } = lossy(() => false);
    const c = newConversationId();
    const thrower = {
      ...collector(),
      event: () => {
        throw new Error('a broken subscriber');
      },
    };
    const good = collector();
    const subscriptions_ = [subscriptions.subscribe(c, 0, thrower), subscriptions.subscribe(c, 0, good)];
    await Promise.all(subscriptions_.map((s) => s.caughtUp));
    await appendMany(log, c, 3);
    await good.until(3);
    expect(thrower.failures).toEqual([new Error('a broken subscriber')]);
    subscriptions_[1]!.close();
  });

  test('what a subscriber returns that is not a promise (a callback’s value) is no pace and ends nothing', async () => {
    const { log, subscriptions } = lossy(() => false);
    const c = newConversationId();
    const seen: number[] = [];
    // Typed as returning nothing, as callbacks are, while it returns the array's new length.
    const push: (e: LoggedEvent) => void = (e) => seen.push(e.event.id);
    const subscriber = { event: push, failed: () => void seen.push(-1) };
    const subscription = subscriptions.subscribe(c, 0, subscriber);
    await appendMany(log, c, 2);
    await subscription.caughtUp;
    await appendMany(log, c, 2, 2);
    subscription.close();
    expect(seen).toEqual([0, 1, 2, 3]);
  });

  test('one follow feeds every subscription; it stops with the last one (nothing kept) and starts again for the next', async () => {
    const { log, subscriptions, follows, stops } = lossy(() => false, { tail: { keepMs: 0 } });
    const [a, b] = [newConversationId(), newConversationId()];
    const first = [subscriptions.subscribe(a, 0, collector()), subscriptions.subscribe(b, 0, collector())];
    await Promise.all(first.map((s) => s.caughtUp));
    expect(follows()).toBe(1);
    first[0]!.close();
    expect(stops()).toBe(0);
    first[1]!.close();
    expect(stops()).toBe(1);
    const got = collector();
    const again = subscriptions.subscribe(a, 0, got);
    await again.caughtUp;
    await appendMany(log, a, 1);
    await got.until(1);
    expect(follows()).toBe(2);
    again.close();
  });

  test('a cursor that is not a non-negative integer is refused', () => {
    const { subscriptions } = lossy(() => false);
    expect(() => subscriptions.subscribe(newConversationId(), -1, collector())).toThrow(RangeError);
    expect(() => subscriptions.subscribe(newConversationId(), 1.5, collector())).toThrow(RangeError);
  });
});
