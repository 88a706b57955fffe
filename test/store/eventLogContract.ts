// The one behaviour every EventLog must have; each implementation's test file runs it.
import { randomBytes } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import type { EventLog } from '../../src/store/eventLog.ts';
import { VersionConflictError } from '../../src/store/errors.ts';

export function newConversationId(): string {
  return `conv_${randomBytes(6).toString('hex')}`;
}

/** A message event with a deterministic body, so tests can rebuild the expected value. */
export function message(conversationId: string, id: number): StoredEvent {
  return {
    v: 1,
    id,
    conversation_id: conversationId,
    ts: new Date(Date.UTC(2025, 0, 1, 0, 0, id)).toISOString(),
    source: 'user',
    type: 'message',
    data: { content: `message ${id}` },
  };
}

/** Appends events `firstId..firstId+count-1` as the single writer; returns their sequences. */
export async function appendMany(log: EventLog, conversationId: string, count: number, firstId = 0): Promise<number[]> {
  let last = await log.lastSeq(conversationId);
  const seqs: number[] = [];
  for (let id = firstId; id < firstId + count; id++) {
    ({ seq: last } = await log.append(message(conversationId, id), { expectedLastSeq: last }));
    seqs.push(last);
  }
  return seqs;
}

function logged(conversationId: string, seqs: number[], firstId = 0): LoggedEvent[] {
  return seqs.map((seq, i) => ({ seq, event: message(conversationId, firstId + i) }));
}

/** A subscriber that keeps what it gets; `pace` may hold an event's successor back. */
export function collector(pace: (item: LoggedEvent) => Promise<void> | undefined = () => undefined) {
  const items: LoggedEvent[] = [];
  const failures: unknown[] = [];
  let wake = () => {};
  return {
    items,
    failures,
    event(item: LoggedEvent): Promise<void> | undefined {
      items.push(item);
      wake();
      return pace(item);
    },
    failed(err: unknown): void {
      failures.push(err);
      wake();
    },
    /** Resolves once `count` events came (rejects after 10 s, or on a failure). */
    async until(count: number): Promise<void> {
      const deadline = Date.now() + 10_000;
      while (items.length < count) {
        if (failures.length > 0) throw failures[0];
        if (Date.now() > deadline) throw new Error(`${items.length} of ${count} events within 10 s`);
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, 50);
        });
      }
    },
  };
}

export function eventLogContract(name: string, makeLog: () => Promise<EventLog>): void {
  describe(`${name} honours the EventLog contract`, () => {
    test('appends get increasing sequences and read returns every event in append order', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const seqs = await appendMany(log, c, 5);
      expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
      expect(new Set(seqs).size).toBe(5);
      expect(await log.read(c)).toEqual({ items: logged(c, seqs), hasMore: false });
    });

    test('read after a sequence returns only later events, at most limit, and says whether more remain', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const seqs = await appendMany(log, c, 6);
      expect(await log.read(c, { afterSeq: seqs[1]!, limit: 2 })).toEqual({
        items: logged(c, seqs.slice(2, 4), 2),
        hasMore: true,
      });
      expect(await log.read(c, { afterSeq: seqs[3]!, limit: 2 })).toEqual({
        items: logged(c, seqs.slice(4), 4),
        hasMore: false,
      });
      expect(await log.read(c, { limit: 1 })).toEqual({ items: logged(c, seqs.slice(0, 1)), hasMore: true });
      expect(await log.read(c, { afterSeq: seqs[5]! })).toEqual({ items: [], hasMore: false });
    });

    test('a page ends with the event that brings its stored bytes to maxBytes, and holds at least one', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const seqs = await appendMany(log, c, 6);
      const size = Buffer.byteLength(JSON.stringify(message(c, 0)));
      // Events 0..9 serialise to the same length; two and a bit of them end the page after the third.
      expect(await log.read(c, { maxBytes: 2 * size + 1 })).toEqual({
        items: logged(c, seqs.slice(0, 3)),
        hasMore: true,
      });
      expect(await log.read(c, { afterSeq: seqs[2]!, maxBytes: 1 })).toEqual({
        items: logged(c, seqs.slice(3, 4), 3),
        hasMore: true,
      });
      expect(await log.read(c, { afterSeq: seqs[3]!, limit: 10, maxBytes: 100 * size })).toEqual({
        items: logged(c, seqs.slice(4), 4),
        hasMore: false,
      });
    });

    test('a conversation without events reads as empty with last sequence 0', async () => {
      const log = await makeLog();
      await appendMany(log, newConversationId(), 2);
      const empty = newConversationId();
      expect(await log.read(empty)).toEqual({ items: [], hasMore: false });
      expect(await log.lastSeq(empty)).toBe(0);
    });

    test('lastSeq is the sequence of the conversation’s own last append', async () => {
      const log = await makeLog();
      const [a, b] = [newConversationId(), newConversationId()];
      await appendMany(log, a, 1);
      const [bSeq] = await appendMany(log, b, 1);
      const [aSeq] = await appendMany(log, a, 1, 1);
      expect(await log.lastSeq(a)).toBe(aSeq);
      expect(await log.lastSeq(b)).toBe(bSeq);
    });

    test('last returns the conversation’s own newest event with its sequence, and nothing for an empty one', async () => {
      const log = await makeLog();
      const a = newConversationId();
      const b = newConversationId();
      expect(await log.last(a)).toBeUndefined();
      const [, second] = await appendMany(log, a, 2);
      await appendMany(log, b, 1);
      expect(await log.last(a)).toEqual({ seq: second, event: message(a, 1) });
    });

    test('an append with a stale expected sequence fails with VersionConflictError and stores nothing', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const seqs = await appendMany(log, c, 2);
      const append = log.append(message(c, 2), { expectedLastSeq: seqs[0]! });
      await expect(append).rejects.toBeInstanceOf(VersionConflictError);
      await expect(append).rejects.toMatchObject({
        conversationId: c,
        expectedLastSeq: seqs[0],
        code: 'VERSION_CONFLICT',
      });
      expect(await log.read(c)).toEqual({ items: logged(c, seqs), hasMore: false });
    });

    test('an append expecting an empty conversation fails once the conversation has an event', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const [first] = await appendMany(log, c, 1);
      await expect(log.append(message(c, 1), { expectedLastSeq: 0 })).rejects.toBeInstanceOf(VersionConflictError);
      expect(await log.lastSeq(c)).toBe(first);
    });

    test('an append expecting a sequence the conversation never reached fails', async () => {
      const log = await makeLog();
      const c = newConversationId();
      await expect(log.append(message(c, 0), { expectedLastSeq: 999 })).rejects.toBeInstanceOf(VersionConflictError);
      expect(await log.lastSeq(c)).toBe(0);
    });

    test('a retried append with the same msgId returns the original sequence and is stored once', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const first = await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'client-1' });
      expect(first.duplicate).toBe(false);
      const [second] = await appendMany(log, c, 1, 1);
      // The retry still carries the expectation it was first sent with: dedupe must win.
      const retry = await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'client-1' });
      expect(retry).toEqual({ seq: first.seq, duplicate: true });
      expect(await log.read(c)).toEqual({ items: logged(c, [first.seq, second!]), hasMore: false });
    });

    test('an append refused for its expected sequence does not use up its msgId', async () => {
      const log = await makeLog();
      const c = newConversationId();
      await expect(
        log.append(message(c, 0), { expectedLastSeq: Number.MAX_SAFE_INTEGER, msgId: 'probe-1' }),
      ).rejects.toBeInstanceOf(VersionConflictError);
      const stored = await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'probe-1' });
      expect(stored.duplicate).toBe(false);
      expect((await log.read(c)).items.map((i) => i.seq)).toEqual([stored.seq]);
    });

    test('a msgId stored before a purge is still a duplicate after it, within the window', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const first = await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'client-1' });
      await log.purge(c);
      expect(await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'client-1' })).toEqual({
        seq: first.seq,
        duplicate: true,
      });
      expect(await log.lastSeq(c)).toBe(0);
    });

    test('the same msgId in two conversations stores an event in each', async () => {
      const log = await makeLog();
      const [a, b] = [newConversationId(), newConversationId()];
      const inA = await log.append(message(a, 0), { expectedLastSeq: 0, msgId: 'client-1' });
      const inB = await log.append(message(b, 0), { expectedLastSeq: 0, msgId: 'client-1' });
      expect(inB.duplicate).toBe(false);
      expect(inB.seq).not.toBe(inA.seq);
      expect(await log.read(b)).toEqual({ items: logged(b, [inB.seq]), hasMore: false });
    });

    test('interleaved conversations keep their own events and their own expected sequences', async () => {
      const log = await makeLog();
      const [a, b] = [newConversationId(), newConversationId()];
      const seqsA: number[] = [];
      const seqsB: number[] = [];
      for (let id = 0; id < 3; id++) {
        seqsA.push(...(await appendMany(log, a, 1, id)));
        seqsB.push(...(await appendMany(log, b, 1, id)));
      }
      expect(await log.read(a)).toEqual({ items: logged(a, seqsA), hasMore: false });
      expect(await log.read(b)).toEqual({ items: logged(b, seqsB), hasMore: false });
    });

    test('a subscription delivers the events stored after its cursor, then those appended later, each once and in order, and none of another conversation', async () => {
      const log = await makeLog();
      const [c, other] = [newConversationId(), newConversationId()];
      const seqs = await appendMany(log, c, 5);
      const got = collector();
      const subscription = log.subscribe(c, seqs[1]!, got);
      await subscription.caughtUp;
      expect(got.items).toEqual(logged(c, seqs.slice(2), 2));
      for (let id = 5; id < 25; id++) {
        seqs.push(...(await appendMany(log, c, 1, id)));
        await appendMany(log, other, 1, id - 5);
      }
      await got.until(seqs.length - 2);
      subscription.close();
      expect(got.items).toEqual(logged(c, seqs.slice(2), 2));
      expect(got.failures).toEqual([]);
    });

    test('a subscription from 0 of a conversation with no events yet gets its events as they are appended', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const got = collector();
      const subscription = log.subscribe(c, 0, got);
      await subscription.caughtUp;
      expect(got.items).toEqual([]);
      const seqs = await appendMany(log, c, 3);
      await got.until(3);
      subscription.close();
      expect(got.items).toEqual(logged(c, seqs));
    });

    test('events appended while a subscription catches up at its subscriber’s pace come after the stored ones, each once', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const seqs = await appendMany(log, c, 250);
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      const got = collector((item) => (item.event.id === 10 ? held : undefined));
      const subscription = log.subscribe(c, 0, got);
      await got.until(11);
      // Held at event 10: more are stored meanwhile, and come live.
      seqs.push(...(await appendMany(log, c, 30, 250)));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(got.items.length).toBe(11);
      release();
      await got.until(280);
      await subscription.caughtUp;
      subscription.close();
      expect(got.items).toEqual(logged(c, seqs));
    });

    test('several subscriptions of one conversation each get every event, from their own cursors', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const seqs = await appendMany(log, c, 4);
      const [first, second] = [collector(), collector()];
      const subscriptions = [log.subscribe(c, 0, first), log.subscribe(c, seqs[2]!, second)];
      await Promise.all(subscriptions.map((s) => s.caughtUp));
      seqs.push(...(await appendMany(log, c, 3, 4)));
      await first.until(7);
      await second.until(4);
      for (const s of subscriptions) s.close();
      expect(first.items).toEqual(logged(c, seqs));
      expect(second.items).toEqual(logged(c, seqs.slice(3), 3));
    });

    test('close ends a subscription: events appended afterwards are not delivered', async () => {
      const log = await makeLog();
      const c = newConversationId();
      const got = collector();
      const subscription = log.subscribe(c, 0, got);
      await subscription.caughtUp;
      const [seq] = await appendMany(log, c, 1);
      await got.until(1);
      subscription.close();
      await appendMany(log, c, 2, 1);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(got.items).toEqual([{ seq, event: message(c, 0) }]);
    });

    test('purge removes every event of the conversation and leaves the others', async () => {
      const log = await makeLog();
      const [a, b] = [newConversationId(), newConversationId()];
      const seqsA = await appendMany(log, a, 3);
      const seqsB = await appendMany(log, b, 2);
      await log.purge(a);
      expect(await log.read(a)).toEqual({ items: [], hasMore: false });
      expect(await log.lastSeq(a)).toBe(0);
      expect(await log.read(b)).toEqual({ items: logged(b, seqsB), hasMore: false });
      const [again] = await appendMany(log, a, 1);
      expect(again).toBeGreaterThan(Math.max(...seqsA, ...seqsB));
    });

    test('ids that are not subject-safe and bad read ranges are refused', async () => {
      const log = await makeLog();
      await expect(log.read('a.>')).rejects.toBeInstanceOf(TypeError);
      await expect(log.lastSeq('*')).rejects.toBeInstanceOf(TypeError);
      await expect(log.append(message('a b', 0), { expectedLastSeq: 0 })).rejects.toBeInstanceOf(TypeError);
      await expect(log.read(newConversationId(), { afterSeq: -1 })).rejects.toBeInstanceOf(RangeError);
      await expect(log.read(newConversationId(), { limit: 0 })).rejects.toBeInstanceOf(RangeError);
      await expect(log.read(newConversationId(), { maxBytes: 0 })).rejects.toBeInstanceOf(RangeError);
    });
  });
}
