import { describe, expect, onTestFinished, test, vi } from 'vitest';
import { StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { StoreUnavailableError } from '../../src/store/errors.ts';
import { jetStreamEventLog } from '../../src/store/jetStreamEventLog.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import type { NatsConnection } from '../../src/store/index.ts';
import { ensureEventStream } from '../../src/store/natsConnection.ts';
import { connectTestNats, uniqueStreamName, uniqueSubjectPrefix, useTestJetStream } from '../support/nats.ts';
import { appendMany, collector, eventLogContract, message, newConversationId } from './eventLogContract.ts';

let nc: NatsConnection;
let jsm: JetStreamManager;
useTestJetStream((connected, manager) => ([nc, jsm] = [connected, manager]));

async function freshLog() {
  const log = await jetStreamEventLog(nc, { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() });
  onTestFinished(async () => {
    await jsm.streams.delete(log.stream);
  });
  return log;
}

eventLogContract('JetStreamEventLog', freshLog);

describe('JetStreamEventLog on nats-server', () => {
  test('the stream is created with file storage, direct get, a 2 minute dedupe window and the documented subjects', async () => {
    const log = await freshLog();
    const { config } = await jsm.streams.info(log.stream);
    expect(config).toMatchObject({
      subjects: [`${log.subjectPrefix}.*.events`],
      storage: StorageType.File,
      allow_direct: true,
      duplicate_window: 120_000_000_000,
      max_msgs: -1,
      max_bytes: -1,
      max_age: 0,
    });
  });

  test('ensureEventStream brings a stream with drifted subjects back to the documented ones', async () => {
    const log = await freshLog();
    await jsm.streams.update(log.stream, { subjects: [`${log.subjectPrefix}.other`] });
    await ensureEventStream(jsm, { stream: log.stream, subjectPrefix: log.subjectPrefix });
    expect((await jsm.streams.info(log.stream)).config.subjects).toEqual([`${log.subjectPrefix}.*.events`]);
  });

  test('events are stored as their JSON on the documented subject', async () => {
    const log = await freshLog();
    const c = newConversationId();
    const [seq] = await appendMany(log, c, 1);
    const stored = await jsm.streams.getMessage(log.stream, { seq: seq! });
    expect(stored?.subject).toBe(`${log.subjectPrefix}.${c}.events`);
    expect(stored?.json()).toEqual(message(c, 0));
  });

  test('read leaves no consumer behind on the server', async () => {
    const log = await freshLog();
    const c = newConversationId();
    await appendMany(log, c, 3);
    expect((await log.read(c, { limit: 2 })).items).toHaveLength(2);
    const deadline = Date.now() + 2_000;
    let left = await jsm.consumers.list(log.stream).next();
    while (left.length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      left = await jsm.consumers.list(log.stream).next();
    }
    expect(left).toEqual([]);
  });

  test('a read and a follow of more than the 64 MiB nats-server queues for a client arrive whole, on a connection that stays up', async () => {
    // Pulled in one go, 75 MB made nats-server drop the connection as a slow consumer, and the read came back short after 20 s.
    const own = await connectTestNats();
    const statuses: string[] = [];
    void (async () => {
      for await (const s of own.status()) statuses.push(s.type);
    })();
    const log = await jetStreamEventLog(own, { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() });
    onTestFinished(async () => {
      await jsm.streams.delete(log.stream);
      await own.close();
    });
    const c = newConversationId();
    const big = (id: number): StoredEvent => ({
      ...message(c, id),
      type: 'message',
      data: { content: `${id}`.padEnd(500_000, 'x') },
    });
    const count = 150;
    let last = 0;
    for (let id = 0; id < count; id++) ({ seq: last } = await log.append(big(id), { expectedLastSeq: last }));

    const page = await log.read(c, { limit: 1_000 });
    expect(page.hasMore).toBe(false);
    expect(page.items.map((e) => e.event)).toEqual(Array.from({ length: count }, (_, id) => big(id)));

    const followed: number[] = [];
    const follower = log.follow({ wants: () => true, event: (_, e) => followed.push(e.event.id) });
    await follower.ready;
    for (let id = count; id < 2 * count; id++) ({ seq: last } = await log.append(big(id), { expectedLastSeq: last }));
    const deadline = Date.now() + 30_000;
    while (followed.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await follower.stop();
    expect(followed).toEqual(Array.from({ length: count }, (_, id) => count + id));
    expect(statuses.filter((s) => s === 'disconnect' || s === 'reconnect')).toEqual([]);
  }, 60_000);

  test('a subscription gets every event once and in order across a reconnect of its connection to NATS', async () => {
    const own = await connectTestNats();
    const names = { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() };
    const writer = await jetStreamEventLog(nc, names);
    const reader = await jetStreamEventLog(own, names);
    onTestFinished(async () => {
      await jsm.streams.delete(writer.stream);
      await own.close();
    });
    const c = newConversationId();
    const seqs = await appendMany(writer, c, 3);
    const got = collector();
    const subscription = reader.subscribe(c, seqs[0]!, got);
    await subscription.caughtUp;
    seqs.push(...(await appendMany(writer, c, 3, 3)));
    await got.until(5);
    const reconnected = (async () => {
      for await (const s of own.status()) if (s.type === 'reconnect') return;
    })();
    await own.reconnect();
    // Stored by another connection while this one is away and coming back.
    seqs.push(...(await appendMany(writer, c, 5, 6)));
    await reconnected;
    seqs.push(...(await appendMany(writer, c, 5, 11)));
    await got.until(15);
    subscription.close();
    expect(got.items).toEqual(seqs.slice(1).map((seq, i) => ({ seq, event: message(c, i + 1) })));
    expect(got.failures).toEqual([]);
  });

  test('a subscriber back within the time kept is caught up from the node’s memory, without reading the stream', async () => {
    const log = await freshLog();
    const c = newConversationId();
    const first = log.subscribe(c, 0, collector());
    await first.caughtUp;
    first.close();
    const seqs = await appendMany(log, c, 50);
    const reads = vi.spyOn(log, 'read');
    const got = collector();
    const again = log.subscribe(c, seqs[9]!, got);
    await again.caughtUp;
    // Those the follow had not delivered yet when it subscribed come live.
    await got.until(40);
    again.close();
    expect(reads).not.toHaveBeenCalled();
    expect(got.items).toEqual((await log.read(c, { afterSeq: seqs[9]! })).items);
    expect(got.items.map((e) => e.seq)).toEqual(seqs.slice(10));
  });

  test('calls on a closed connection fail with StoreUnavailableError', async () => {
    const own = await connectTestNats();
    const log = await jetStreamEventLog(own, { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() });
    onTestFinished(async () => {
      await jsm.streams.delete(log.stream);
    });
    await own.close();
    const c = newConversationId();
    await expect(log.append(message(c, 0), { expectedLastSeq: 0 })).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(log.read(c)).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(log.lastSeq(c)).rejects.toBeInstanceOf(StoreUnavailableError);
  });
});
