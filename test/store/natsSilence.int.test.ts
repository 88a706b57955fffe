import type { JetStreamManager } from '@nats-io/jetstream';
import { createInbox, type Msg } from '@nats-io/transport-node';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import type { NatsConnection } from '../../src/store/index.ts';
import { jetStreamEventLog } from '../../src/store/jetStreamEventLog.ts';
import { JetStreamFollower } from '../../src/store/jetStreamFollower.ts';
import { JetStreamPublisher } from '../../src/store/jetStreamPublisher.ts';
import { OrderedConsumers } from '../../src/store/orderedConsumers.ts';
import { PageReader } from '../../src/store/pageReader.ts';
import { uniqueStreamName, uniqueSubjectPrefix, useTestJetStream } from '../support/nats.ts';
import { until } from '../support/until.ts';
import { appendMany, newConversationId } from './eventLogContract.ts';

/*
 * What a stream's leader moving does to what is in flight, with the connection
 * up (issue 28): a publish that reached the old leader may be answered by no
 * one, and a consumer made on it may deliver nothing more. Both are made again
 * instead of waited out.
 */

let nc: NatsConnection;
let jsm: JetStreamManager;
useTestJetStream((connected, manager) => ([nc, jsm] = [connected, manager]));

describe('a publish nobody answers', () => {
  it('is sent again after half a second, with the same msg id, and the answer to that is taken', async () => {
    const subject = createInbox();
    const heard: Array<{ at: number; id: string | undefined }> = [];
    // A stand-in for a stream whose leader moved: the first send gets no answer, the second an ack.
    const sub = nc.subscribe(subject, {
      callback: (_err, msg: Msg) => {
        heard.push({ at: performance.now(), id: msg.headers?.get('Nats-Msg-Id') });
        if (heard.length === 2) msg.respond(JSON.stringify({ stream: 'S', seq: 42 }));
      },
    });
    onTestFinished(() => sub.unsubscribe());
    await nc.flush();
    const publisher = new JetStreamPublisher(nc);
    onTestFinished(() => publisher.close());
    const t0 = performance.now();
    const ack = await publisher.publish(subject, new TextEncoder().encode('{}'), { expectedLastSubjectSeq: 0 });
    expect(ack).toEqual({ ok: true, seq: 42, duplicate: false });
    expect(heard).toHaveLength(2);
    expect(heard[1]!.id).toBe(heard[0]!.id);
    expect(heard[1]!.at - t0).toBeGreaterThanOrEqual(450);
    expect(heard[1]!.at - t0).toBeLessThan(1_500);
  });

  it('is not sent again when answered in time', async () => {
    const subject = createInbox();
    let heard = 0;
    const sub = nc.subscribe(subject, {
      callback: (_err, msg: Msg) => {
        heard += 1;
        msg.respond(JSON.stringify({ stream: 'S', seq: 1 }));
      },
    });
    onTestFinished(() => sub.unsubscribe());
    await nc.flush();
    const publisher = new JetStreamPublisher(nc);
    onTestFinished(() => publisher.close());
    await publisher.publish(subject, new TextEncoder().encode('{}'), { expectedLastSubjectSeq: 0 });
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(heard).toBe(1);
  });
});

/** A follow of a new log, on its consumer, with 3 events of a conversation delivered. */
async function followedLog() {
  const log = await jetStreamEventLog(nc, { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() });
  onTestFinished(() => jsm.streams.delete(log.stream).then(() => undefined));
  const got: LoggedEvent[] = [];
  const follower = log.follow({ wants: () => true, event: (_id, logged) => got.push(logged) });
  onTestFinished(() => follower.stop());
  await follower.ready;
  const consumers = async () => (await jsm.consumers.list(log.stream).next()).map((c) => c.name);
  const first = await until(async () => ((await consumers()).length === 1 ? consumers() : undefined), 'its consumer');
  const c = newConversationId();
  await appendMany(log, c, 3);
  await until(() => got.length === 3 || undefined, 'the first events');
  const replaced = () =>
    until(async () => {
      const now = await consumers();
      return now.length === 1 && now[0] !== first[0] ? true : undefined;
    }, 'a new consumer in place of the first');
  /** 3 more events, and every event once, in order. */
  const deliversTheRest = async () => {
    await appendMany(log, c, 3, 3);
    await until(() => got.length === 6 || undefined, 'the events after it');
    expect(got.map((e) => e.event.id)).toEqual([0, 1, 2, 3, 4, 5]);
  };
  return { log, follower, consumers, first, replaced, deliversTheRest };
}

describe('the live feed when its stream elects a leader', () => {
  it('opens a new consumer at once, where it stopped: nothing missed', async () => {
    const { log, replaced, deliversTheRest } = await followedLog();
    // What nats-server announces when the stream elects a leader (a step-down, a server gone).
    nc.publish(`$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.${log.stream}`, JSON.stringify({ stream: log.stream }));
    await replaced();
    await deliversTheRest();
  });
});

describe('the live feed told of an event it does not bring', () => {
  it('opens a new consumer where it stopped within a second when it brings nothing at all meanwhile', async () => {
    const { follower, consumers, replaced, deliversTheRest } = await followedLog();
    // As when the server that holds the consumer stopped without a word to this connection: the
    // consumer is still there in this test (its heartbeats come), so only the expected event can tell.
    const t0 = performance.now();
    follower.expect!(100);
    await replaced();
    expect(performance.now() - t0).toBeLessThan(1_500);
    // Once per expected event: one that never comes (purged first) does not make a consumer every half second.
    const second = await consumers();
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(await consumers()).toEqual(second);
    await deliversTheRest();
  });

  it('keeps its consumer when the events it was told of come (each append tells it)', async () => {
    const { consumers, first, deliversTheRest } = await followedLog();
    await deliversTheRest();
    await new Promise((resolve) => setTimeout(resolve, 800));
    expect(await consumers()).toEqual(first);
  });
});

/** Consumers made `slowFor` ms late, as while JetStream's meta leader, which makes them, is being elected. */
function slowConsumers(slowFor: number): OrderedConsumers {
  return new (class extends OrderedConsumers {
    override get(...args: Parameters<OrderedConsumers['get']>) {
      return new Promise((resolve) => setTimeout(resolve, slowFor)).then(() => super.get(...args));
    }
  })(nc);
}

/** One stream seen through two logs: `plain`, and `log`, whose read consumers come `slowFor` ms late. */
async function logsWithSlowConsumers(slowFor: number) {
  const options = { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() };
  const plain = await jetStreamEventLog(nc, options);
  onTestFinished(() => jsm.streams.delete(plain.stream).then(() => undefined));
  return { plain, log: await jetStreamEventLog(nc, { ...options, consumers: slowConsumers(slowFor) }) };
}

describe('a read while its consumer is slow to be made', () => {
  it('reads its page by direct gets from half a second on, each event once and in order; the late consumer goes', async () => {
    const { plain, log } = await logsWithSlowConsumers(2_000);
    const c = newConversationId();
    const seqs = await appendMany(plain, c, 8);
    await appendMany(plain, newConversationId(), 2);

    let t0 = performance.now();
    const whole = await log.read(c, { afterSeq: seqs[1]! });
    const took = performance.now() - t0;
    expect(whole).toEqual(await plain.read(c, { afterSeq: seqs[1]! }));
    expect(whole.items.map((i) => i.event.id)).toEqual([2, 3, 4, 5, 6, 7]);
    expect(took).toBeGreaterThanOrEqual(450);
    expect(took).toBeLessThan(1_500);
    t0 = performance.now();
    const first = await log.read(c, { limit: 3 });
    expect(performance.now() - t0).toBeLessThan(1_500);
    expect(first).toEqual(await plain.read(c, { limit: 3 }));
    expect(first.hasMore).toBe(true);

    // The consumers made late are deleted once they come.
    await new Promise((resolve) => setTimeout(resolve, t0 + 2_300 - performance.now()));
    await until(
      async () => ((await jsm.consumers.list(log.stream).next()).length === 0 ? true : undefined),
      'the late consumers to go',
    );
  });
});

describe('a read that its consumer overtakes', () => {
  it('goes on with the consumer after what the direct gets brought: the whole log, each event once', async () => {
    // Direct gets from 0.5 s, one at a time: far from 1,500 events when the consumer comes at 0.6 s.
    const { plain, log } = await logsWithSlowConsumers(600);
    const c = newConversationId();
    await appendMany(plain, c, 1_500);
    const whole = await log.read(c);
    expect(whole.items.map((i) => i.event.id)).toEqual(Array.from({ length: 1_500 }, (_, i) => i));
    expect(whole).toEqual(await plain.read(c));
  });

  it('says what the consumer finds when a direct get finds nothing before the last sequence', async () => {
    const options = { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() };
    const plain = await jetStreamEventLog(nc, options);
    onTestFinished(() => jsm.streams.delete(plain.stream).then(() => undefined));
    const c = newConversationId();
    const seqs = await appendMany(plain, c, 3);
    // As when the subject was purged after its last sequence was read.
    const reader = new PageReader(nc, jsm, slowConsumers(800), plain.stream);
    const subject = `${plain.subjectPrefix}.${newConversationId()}.events`;
    expect(await reader.read(subject, { afterSeq: 0, lastSeq: seqs[2]!, limit: 10, maxBytes: 1 << 20 })).toEqual({
      items: [],
      hasMore: false,
    });
  });
});

describe('the live feed while its consumer is slow to be made', () => {
  it('brings the events by direct gets meanwhile, in order, then takes the consumer: each event once', async () => {
    const log = await jetStreamEventLog(nc, { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() });
    onTestFinished(() => jsm.streams.delete(log.stream).then(() => undefined));
    const slowFor = 2_000;
    const got: LoggedEvent[] = [];
    const follower = new JetStreamFollower(
      {
        nc,
        jsm,
        consumers: slowConsumers(slowFor),
        stream: log.stream,
        subjectPrefix: log.subjectPrefix,
        maxBytes: 1 << 20,
      },
      { wants: () => true, event: (_id, logged) => got.push(logged) },
    );
    onTestFinished(() => follower.stop());
    await follower.ready;
    const t0 = performance.now();
    const c = newConversationId();
    await appendMany(log, c, 3);
    await until(() => got.length === 3 || undefined, 'the events by direct gets');
    expect(performance.now() - t0).toBeLessThan(slowFor / 2);
    expect(await jsm.consumers.list(log.stream).next()).toEqual([]);

    await until(
      async () => ((await jsm.consumers.list(log.stream).next()).length === 1 ? true : undefined),
      'the consumer',
    );
    await appendMany(log, c, 3, 3);
    await until(() => got.length === 6 || undefined, 'the events after it');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(got.map((e) => e.event.id)).toEqual([0, 1, 2, 3, 4, 5]);
  });
});
