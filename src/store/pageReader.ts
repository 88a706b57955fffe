import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type Consumer, type JetStreamManager, type JsMsg, type StoredMsg } from '@nats-io/jetstream';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import type { ReadPage } from './eventLog.ts';
import type { ReadRange } from './eventLogRules.ts';
import { pullBytes } from './natsConnection.ts';
import { isTimeout } from './natsErrors.ts';
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
/** How long one direct get of such a read waits for an answer. */
const DIRECT_GET_TIMEOUT_MS = 1_000;
/** A get that one server does not answer (one going away) is asked again, of any of the stream's servers. */
const GET_ATTEMPTS = 3;

/** What one page covers: after `afterSeq`, up to the subject's `lastSeq` when the read began. */
export type PageRange = ReadRange & { lastSeq: number };

/**
 * Reads one page of a subject: from a fresh ordered consumer, or, when that
 * is slow to be made, by direct gets (`next_by_subj`), one event at a time,
 * which any of the stream's servers answers. The direct gets end the page
 * early once the consumer comes: they are a fallback, slower for a long page.
 */
export class PageReader {
  readonly #nc: NatsConnection;
  readonly #consumers: OrderedConsumers;
  readonly #stream: string;
  /** For the direct gets: a short timeout. */
  #directJsm: Promise<JetStreamManager> | undefined;

  constructor(nc: NatsConnection, consumers: OrderedConsumers, stream: string) {
    this.#nc = nc;
    this.#consumers = consumers;
    this.#stream = stream;
  }

  async read(subject: string, range: PageRange): Promise<ReadPage> {
    const making = this.#consumers.get(this.#stream, {
      filter_subjects: subject, // a string: 2.9 has no multi-filter consumers
      opt_start_seq: range.afterSeq + 1,
      inactive_threshold: READ_CONSUMER_IDLE_MS,
    });
    let consumer = await soonOrNull(making, SLOW_CONSUMER_MS);
    if (consumer === null) {
      const direct = await this.#whileMaking(subject, range, making);
      if (!direct.came) return direct.page;
      // The consumer came before the first get: it reads the page.
      if (direct.page.items.length > 0) {
        direct.came.delete().catch(() => {});
        return direct.page;
      }
      consumer = direct.came;
    }
    try {
      return await readPage(consumer, range.limit, range.maxBytes, pullBytes(this.#nc));
    } finally {
      consumer.delete().catch(() => {});
    }
  }

  /** A page by direct gets while `making` has not come: the consumer if it came meanwhile (deleted if later). */
  async #whileMaking(
    subject: string,
    range: PageRange,
    making: Promise<Consumer>,
  ): Promise<{ page: ReadPage; came?: Consumer }> {
    let came: Consumer | undefined;
    let used = false;
    making.then(
      (late) => {
        if (used) late.delete().catch(() => {});
        else came = late;
      },
      () => undefined,
    );
    this.#directJsm ??= jetstreamManager(this.#nc, { timeout: DIRECT_GET_TIMEOUT_MS, checkAPI: false });
    try {
      const page = await this.#byDirectGets(await this.#directJsm, subject, range, () => came !== undefined);
      return { page, came };
    } catch (err) {
      came?.delete().catch(() => {});
      throw err;
    } finally {
      used = true;
    }
  }

  async #byDirectGets(
    jsm: JetStreamManager,
    subject: string,
    range: PageRange,
    enough: () => boolean,
  ): Promise<ReadPage> {
    const items: LoggedEvent[] = [];
    let next = range.afterSeq + 1;
    let bytes = 0;
    while (next <= range.lastSeq && items.length < range.limit && bytes < range.maxBytes && !enough()) {
      const m = await this.#getNext(jsm, subject, next);
      if (m === null || m.seq > range.lastSeq) break;
      items.push({ seq: m.seq, event: parseMessage(m.seq, m.subject, m.data) });
      bytes += m.data.length;
      next = m.seq + 1;
    }
    return { items, hasMore: next <= range.lastSeq };
  }

  async #getNext(jsm: JetStreamManager, subject: string, seq: number): Promise<StoredMsg | null> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await jsm.direct.getMessage(this.#stream, { seq, next_by_subj: subject });
      } catch (err) {
        if (attempt >= GET_ATTEMPTS || !isTimeout(err)) throw err;
      }
    }
  }
}

/**
 * Reads from a fresh ordered consumer until the page is full or nothing is
 * pending. The consumer's creation reply says how many messages match, so the
 * read stops at exactly that many and never waits for a timeout. Pulls are
 * bounded in bytes, not messages: a pull of many large events would exceed
 * what nats-server queues for one client (64 MiB by default), and the server
 * would then drop the node's whole connection as a slow consumer. The page
 * ends early once it holds `maxBytes` (what it is kept in memory for).
 */
async function readPage(consumer: Consumer, limit: number, maxBytes: number, pullBytes: number): Promise<ReadPage> {
  const pending = (await consumer.info(true)).num_pending;
  const want = Math.min(limit, pending);
  const items: LoggedEvent[] = [];
  if (want === 0) return { items, hasMore: pending > 0 };
  const messages = await consumer.consume({ max_bytes: pullBytes });
  let seen = 0;
  const stall = setInterval(() => {
    if (items.length === seen) messages.stop();
    seen = items.length;
  }, READ_STALL_MS);
  // Only the last message needs its JetStream info parsed (a tenth of a read's cost when done for each).
  let last: JsMsg | undefined;
  let bytes = 0;
  try {
    for await (const m of messages) {
      items.push({ seq: m.seq, event: parseMessage(m.seq, m.subject, m.data) });
      last = m;
      bytes += m.data.length;
      if (items.length >= want || bytes >= maxBytes) break;
    }
  } finally {
    clearInterval(stall);
    messages.stop();
  }
  return { items, hasMore: last ? last.info.pending > 0 : pending > 0 };
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
