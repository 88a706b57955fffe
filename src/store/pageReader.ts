import type { NatsConnection } from '@nats-io/transport-node';
import type { Consumer, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import type { ReadPage } from './eventLog.ts';
import type { ReadRange } from './eventLogRules.ts';
import { pullBytes } from './natsConnection.ts';
import { directGet } from './directGet.ts';
import type { OrderedConsumers } from './orderedConsumers.ts';

/** A read that receives nothing for this long while messages are pending means the subject was purged under us. */
const READ_STALL_MS = 10_000;
/** Read consumers are deleted after use; this only bounds a leak if the delete is lost. */
const READ_CONSUMER_IDLE_MS = 60_000;
/**
 * A read whose consumer is not made within this reads its page by direct gets
 * instead: making one waits for JetStream's meta leader, which a rolling
 * restart takes away for up to 5 s while the stream's servers answer.
 */
const SLOW_CONSUMER_MS = 500;

/** What one page covers: after `afterSeq`, up to the subject's `lastSeq` when the read began. */
export type PageRange = ReadRange & { lastSeq: number };

/** What a page holds so far: its items and their stored bytes. */
interface Begun {
  items: LoggedEvent[];
  bytes: number;
}

/**
 * Reads one page of a subject: from a fresh ordered consumer, or, when that
 * is slow to be made, by direct gets (`next_by_subj`), one event at a time,
 * which any of the stream's servers answers. The direct gets are a fallback,
 * slower for a long page: once the consumer comes (or a get finds nothing or
 * fails) the page goes on with the consumer, after what they brought, so a
 * page is the same whichever way it was read.
 */
export class PageReader {
  readonly #nc: NatsConnection;
  readonly #consumers: OrderedConsumers;
  readonly #stream: string;
  readonly #jsm: JetStreamManager;

  constructor(nc: NatsConnection, jsm: JetStreamManager, consumers: OrderedConsumers, stream: string) {
    this.#nc = nc;
    this.#jsm = jsm;
    this.#consumers = consumers;
    this.#stream = stream;
  }

  async read(subject: string, range: PageRange): Promise<ReadPage> {
    let done = false;
    const making = this.#consumers.get(
      this.#stream,
      {
        filter_subjects: subject, // a string: 2.9 has no multi-filter consumers
        opt_start_seq: range.afterSeq + 1,
        inactive_threshold: READ_CONSUMER_IDLE_MS,
      },
      // No further attempt once the page is read (by direct gets).
      () => done,
    );
    try {
      let consumer = await soonOrNull(making, SLOW_CONSUMER_MS);
      let begun: Begun = { items: [], bytes: 0 };
      if (consumer === null) {
        const direct = await this.#byDirectGets(subject, range, making);
        if (direct.whole) return direct.page;
        begun = direct.page;
        consumer = await making;
      }
      return await readPage(consumer, range, pullBytes(this.#nc), begun);
    } finally {
      done = true;
      // The consumer, used or made after all (once it comes).
      making.then(
        (made) => void made.delete().catch(() => {}),
        () => undefined,
      );
    }
  }

  /**
   * The page by direct gets until `making` comes: whole, or begun (the
   * consumer came, a get found nothing before the page's last sequence, or
   * failed: the consumer goes on from there).
   */
  async #byDirectGets(
    subject: string,
    range: PageRange,
    making: Promise<Consumer>,
  ): Promise<{ whole: true; page: ReadPage } | { whole: false; page: Begun }> {
    let came = false;
    making.then(
      () => void (came = true),
      () => undefined,
    );
    const items: LoggedEvent[] = [];
    let next = range.afterSeq + 1;
    let bytes = 0;
    try {
      while (next <= range.lastSeq && items.length < range.limit && bytes < range.maxBytes) {
        if (came) return { whole: false, page: { items, bytes } };
        const m = await directGet(this.#jsm, this.#stream, { seq: next, next_by_subj: subject });
        if (m === null) break;
        if (m.seq > range.lastSeq) {
          next = m.seq;
          break;
        }
        items.push({ seq: m.seq, event: parseMessage(m.seq, m.subject, m.data) });
        bytes += m.data.length;
        next = m.seq + 1;
      }
    } catch {
      return { whole: false, page: { items, bytes } };
    }
    if (next <= range.lastSeq && items.length < range.limit && bytes < range.maxBytes) {
      // Nothing found before the last sequence: the consumer says what is there.
      return { whole: false, page: { items, bytes } };
    }
    return { whole: true, page: { items, hasMore: next <= range.lastSeq } };
  }
}

/**
 * Reads from a fresh ordered consumer until the page is full or nothing is
 * pending, after what `begun` already holds (the consumer's first messages,
 * skipped: only their sequences are read). The consumer's creation reply
 * says how many messages match, so the read stops at exactly that many and
 * never waits for a timeout. Pulls are bounded in bytes, not messages: a
 * pull of many large events would exceed what nats-server queues for one
 * client (64 MiB by default), and the server would then drop the node's
 * whole connection as a slow consumer. The page ends early once it holds
 * `maxBytes` (what it is kept in memory for).
 */
async function readPage(consumer: Consumer, range: PageRange, pullBytes: number, begun: Begun): Promise<ReadPage> {
  const pending = (await consumer.info(true)).num_pending;
  const want = Math.min(range.limit, pending);
  const { items } = begun;
  let { bytes } = begun;
  // The consumer brings what the direct gets brought first (unless some was purged meanwhile).
  const skipThrough = items.at(-1)?.seq ?? 0;
  let skipping = items.length > 0;
  if (items.length >= want || bytes >= range.maxBytes) return { items, hasMore: pending > items.length };
  const messages = await consumer.consume({ max_bytes: pullBytes });
  let seen = -1;
  let delivered = 0;
  const stall = setInterval(() => {
    if (delivered === seen) messages.stop();
    seen = delivered;
  }, READ_STALL_MS);
  // Only the last message needs its JetStream info parsed (a tenth of a read's cost when done for each).
  let last: JsMsg | undefined;
  try {
    for await (const m of messages) {
      delivered++;
      if (skipping) {
        if (m.seq <= skipThrough) continue;
        skipping = false;
      }
      items.push({ seq: m.seq, event: parseMessage(m.seq, m.subject, m.data) });
      last = m;
      bytes += m.data.length;
      if (items.length >= want || bytes >= range.maxBytes) break;
    }
  } finally {
    clearInterval(stall);
    messages.stop();
  }
  return { items, hasMore: last ? last.info.pending > 0 : pending > items.length };
}

/** What `promise` gives within `ms`, else null (its rejection within `ms` is thrown). */
async function soonOrNull<T>(promise: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ms)));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

const decoder = new TextDecoder();

/**
 * A stored message's event. JSON.parse only: events were validated before
 * they were appended, and this is the hot path of every replay.
 */
function parseMessage(seq: number, subject: string, data: Uint8Array): StoredEvent {
  try {
    return JSON.parse(decoder.decode(data)) as StoredEvent;
  } catch (err) {
    throw new Error(`stream message ${seq} on ${subject} is not JSON`, { cause: err });
  }
}
