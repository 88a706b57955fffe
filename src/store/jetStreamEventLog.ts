import type { NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiCodes, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { eventBytes, type LoggedEvent, type StoredEvent } from '../../protocol/index.ts';
import type {
  AppendOptions,
  AppendResult,
  EventLog,
  FollowHandlers,
  LogFollower,
  LogSubscriber,
  LogSubscription,
  ReadOptions,
  ReadPage,
} from './eventLog.ts';
import { LogSubscriptions } from './logSubscriptions.ts';
import type { TailLimits } from './logTail.ts';
import { assertConversationId } from './assertConversationId.ts';
import { VersionConflictError } from './errors.ts';
import { readRange, scopedMsgId } from './eventLogRules.ts';
import { JetStreamFollower } from './jetStreamFollower.ts';
import { JetStreamPublisher, type PubAck } from './jetStreamPublisher.ts';
import {
  DEFAULT_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  ensureEventStream,
  pullBytes,
  subjectFor,
  type EventStreamOptions,
} from './natsConnection.ts';
import { toStoreError } from './natsErrors.ts';
import { OrderedConsumers } from './orderedConsumers.ts';
import { PageReader } from './pageReader.ts';
import { directGet } from './directGet.ts';

/** Stream name (default `TETHER_EVENTS`), subject prefix (default `tether.conv`) and replicas (default 1). */
export interface JetStreamEventLogOptions extends EventStreamOptions {
  /** Told when the follow that feeds subscriptions failed; it starts again where it stopped, nothing is skipped. */
  onFollowError?: (err: unknown) => void;
  /** What the follow keeps of each followed conversation to serve a resume from memory (DEFAULT_TAIL_LIMITS). */
  tail?: Partial<TailLimits>;
  /** Makes the consumers reads use (tests hold them back). */
  consumers?: OrderedConsumers;
}

// Both codes mean "the subject moved past the expected sequence"; 10164 is how
// newer servers say it when they cannot tell the actual last sequence.
const CONFLICT_CODES: ReadonlySet<number> = new Set([
  JetStreamApiCodes.StreamWrongLastSequence,
  JetStreamApiCodes.StreamWrongLastSequenceUnknown,
]);

/**
 * The event log on NATS JetStream: one stream, one subject per conversation,
 * the stream sequence as the event's position.
 *
 * The single-writer check is JetStream's expected last subject sequence, sent
 * on every append. nats-server 2.9.10 enforces it for 0 too (an append
 * expecting an empty conversation fails once the subject has a message), so no
 * emulation is needed. Retries dedupe on `Nats-Msg-Id` (the caller's msgId,
 * scoped by conversation) within the stream's 2 minute duplicate window; the
 * server decides dedupe before the expected-sequence check, so a retry returns
 * the original sequence even after the log moved on. A purge does not clear
 * the window. Past the window a retry is a new append and meets the check.
 */
export class JetStreamEventLog implements EventLog {
  readonly stream: string;
  readonly subjectPrefix: string;
  readonly #nc: NatsConnection;
  readonly #consumers: OrderedConsumers;
  readonly #pages: PageReader;
  readonly #jsm: JetStreamManager;
  readonly #subscriptions: LogSubscriptions;
  // Made at the first append: a log opened by a start attempt that then failed holds no subscription or timer.
  #publisherMade: JetStreamPublisher | undefined;

  constructor(nc: NatsConnection, jsm: JetStreamManager, options: JetStreamEventLogOptions = {}) {
    this.stream = options.stream ?? DEFAULT_STREAM;
    this.subjectPrefix = options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    this.#nc = nc;
    this.#consumers = options.consumers ?? new OrderedConsumers(nc);
    this.#jsm = jsm;
    this.#pages = new PageReader(nc, jsm, this.#consumers, this.stream);
    this.#subscriptions = new LogSubscriptions(this, { onFollowError: options.onFollowError, tail: options.tail });
  }

  get #publisher(): JetStreamPublisher {
    return (this.#publisherMade ??= new JetStreamPublisher(this.#nc));
  }

  async append(event: StoredEvent, options: AppendOptions): Promise<AppendResult> {
    const conversationId = event.conversation_id;
    const subject = subjectFor(this.subjectPrefix, conversationId);
    const { expectedLastSeq, msgId } = options;
    let ack;
    try {
      ack = await this.#publisher.publish(subject, eventBytes(event), {
        expectedLastSubjectSeq: expectedLastSeq,
        ...(msgId !== undefined && { msgId: scopedMsgId(conversationId, msgId) }),
      });
    } catch (err) {
      throw toStoreError(err, `appending to conversation ${conversationId}`);
    }
    const stored = ack.ok
      ? { seq: ack.seq, duplicate: ack.duplicate }
      : await this.#refused(conversationId, expectedLastSeq, ack);
    this.expectDelivery(conversationId, stored.seq);
    return stored;
  }

  /** A publish JetStream did not take: our own first send, stored after all, or a conflict or refusal. */
  async #refused(
    conversationId: string,
    expectedLastSeq: number,
    ack: Extract<PubAck, { ok: false }>,
  ): Promise<AppendResult> {
    if (CONFLICT_CODES.has(ack.errCode)) {
      // Sent again after a drop or a 503, it may meet its own first send, stored: a stream leader elected
      // meanwhile may not know that send's msg id yet. The next event on the subject says whether it is ours.
      const ours =
        ack.resentAs === undefined
          ? undefined
          : await this.#storedAs(subjectFor(this.subjectPrefix, conversationId), expectedLastSeq, ack.resentAs);
      if (ours !== undefined) return { seq: ours, duplicate: false };
      throw new VersionConflictError(conversationId, expectedLastSeq, { cause: new Error(ack.description) });
    }
    throw new Error(`JetStream refused an event of ${conversationId}: ${ack.description} (${ack.errCode})`);
  }

  /** The seq of the first event on `subject` after `afterSeq` when it carries `msgId`. */
  async #storedAs(subject: string, afterSeq: number, msgId: string): Promise<number | undefined> {
    const next = await directGet(this.#jsm, this.stream, { seq: afterSeq + 1, next_by_subj: subject }).catch(
      () => null,
    );
    return next?.header?.get('Nats-Msg-Id') === msgId ? next.seq : undefined;
  }

  async read(conversationId: string, options?: ReadOptions): Promise<ReadPage> {
    const range = readRange(options);
    const subject = subjectFor(this.subjectPrefix, conversationId);
    try {
      // One direct get answers the common "nothing new" case without a consumer.
      const lastSeq = await this.#lastSeqOn(subject);
      if (lastSeq <= range.afterSeq) return { items: [], hasMore: false };
      return await this.#pages.read(subject, { ...range, lastSeq });
    } catch (err) {
      throw toStoreError(err, `reading conversation ${conversationId}`);
    }
  }

  async lastSeq(conversationId: string): Promise<number> {
    const subject = subjectFor(this.subjectPrefix, conversationId);
    try {
      return await this.#lastSeqOn(subject);
    } catch (err) {
      throw toStoreError(err, `reading the last sequence of conversation ${conversationId}`);
    }
  }

  async last(conversationId: string): Promise<LoggedEvent | undefined> {
    const subject = subjectFor(this.subjectPrefix, conversationId);
    let message;
    try {
      message = await this.#lastOn(subject);
    } catch (err) {
      throw toStoreError(err, `reading the last event of conversation ${conversationId}`);
    }
    if (message === null) return undefined;
    try {
      return { seq: message.seq, event: message.json<StoredEvent>() };
    } catch (err) {
      throw new Error(`stream message ${message.seq} on ${subject} is not JSON`, { cause: err });
    }
  }

  subscribe(conversationId: string, afterSeq: number, subscriber: LogSubscriber): LogSubscription {
    assertConversationId(conversationId);
    return this.#subscriptions.subscribe(conversationId, afterSeq, subscriber);
  }

  expectDelivery(conversationId: string, seq: number): void {
    this.#subscriptions.expect(conversationId, seq);
  }

  /** One ordered consumer of every conversation's events appended from now on: what feeds the subscriptions. */
  follow(handlers: FollowHandlers): LogFollower {
    return new JetStreamFollower(
      {
        nc: this.#nc,
        consumers: this.#consumers,
        jsm: this.#jsm,
        stream: this.stream,
        subjectPrefix: this.subjectPrefix,
        maxBytes: pullBytes(this.#nc),
      },
      handlers,
    );
  }

  async purge(conversationId: string): Promise<void> {
    const subject = subjectFor(this.subjectPrefix, conversationId);
    this.#subscriptions.forget(conversationId);
    try {
      await this.#jsm.streams.purge(this.stream, { filter: subject });
    } catch (err) {
      throw toStoreError(err, `purging conversation ${conversationId}`);
    }
  }

  async #lastSeqOn(subject: string): Promise<number> {
    return (await this.#lastOn(subject))?.seq ?? 0;
  }

  /** The subject's last message; null when it has none (the client maps the server's 404 to null). */
  #lastOn(subject: string) {
    return directGet(this.#jsm, this.stream, { last_by_subj: subject });
  }
}

/** Opens the event log on `nc`, creating or updating its stream first. */
export async function jetStreamEventLog(
  nc: NatsConnection,
  options: JetStreamEventLogOptions = {},
): Promise<JetStreamEventLog> {
  try {
    const jsm = await jetstreamManager(nc);
    await ensureEventStream(jsm, options);
    return new JetStreamEventLog(nc, jsm, options);
  } catch (err) {
    throw toStoreError(err, 'opening the event log');
  }
}
