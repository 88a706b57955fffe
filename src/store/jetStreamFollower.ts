import { jetstreamManager, type JetStreamManager, type StoredMsg } from '@nats-io/jetstream';
import type { NatsConnection, Status, Subscription } from '@nats-io/transport-node';
import { parseStoredEvent } from '../../protocol/index.ts';
import { CreditedPull } from './creditedPull.ts';
import type { FollowHandlers, LogFollower } from './eventLog.ts';
import type { OrderedConsumers } from './orderedConsumers.ts';
import { SilenceWatch } from './silenceWatch.ts';

/**
 * How long a follow waits before it opens its consumer again after a failure:
 * a quarter of a second the first time (the server that held the consumer
 * stopped, or its stream's leader moved: every client of the node waits for
 * the new consumer, which a leader being elected would refuse), then 1 s.
 */
const RESTART_DELAY_MS = 1_000;
const FIRST_RESTART_DELAY_MS = 250;
const restartDelay = (failures: number) => (failures <= 1 ? FIRST_RESTART_DELAY_MS : RESTART_DELAY_MS);
/**
 * The server's heartbeat on an idle pull; two missed in a row and the follow
 * opens a new consumer. nats.js would only ask for the consumer's info again,
 * for ever, when the server that held it was killed (the info times out: it is
 * neither there nor gone), and the feed would stay silent. (Half a second
 * was tried for issue 28's rolling restart: no better, and more consumers
 * made while streams elect.)
 */
const HEARTBEAT_MS = 1_000;
const ORPHAN_MS = 60_000;
/**
 * A consumer not made this long after it was asked for: the follow reads on
 * with direct gets until it is. Making a consumer needs JetStream's meta
 * leader; when the server that stopped was that leader, its election took up
 * to 5 s in the rolling restart (issue 28), and every client of the node
 * waited, while the stream's servers, which answer direct gets, were there.
 */
const BRIDGE_AFTER_MS = 250;
/** Between two direct gets that found nothing new. */
const BRIDGE_POLL_MS = 50;
/** How long one direct get waits for an answer. */
const BRIDGE_GET_TIMEOUT_MS = 1_000;

export interface JetStreamFollowerOptions {
  nc: NatsConnection;
  consumers: OrderedConsumers;
  jsm: JetStreamManager;
  stream: string;
  subjectPrefix: string;
  /** The bytes one pull request may ask for (see pullBytes). */
  maxBytes: number;
}

/**
 * One consumer on every conversation's subject (`<prefix>.*.events`), from the
 * stream's next sequence when the follow starts, pulled by a CreditedPull
 * (bounded in messages and bytes per request, never paused between them).
 * When the pull ends (a skipped message, two missed heartbeats because the
 * server that held the consumer died, a refused request) or the connection
 * comes back after a drop, the follow opens a new consumer at the sequence
 * after the last one it delivered, so no event is skipped; while that consumer
 * is slow to come, the next events are read by direct gets. A conversation's
 * events are parsed only while someone wants them; the parsed event keeps the
 * stored bytes for its frames.
 */
export class JetStreamFollower implements LogFollower {
  readonly ready: Promise<void>;
  readonly #options: JetStreamFollowerOptions;
  readonly #handlers: FollowHandlers;
  /** The stream sequence the next consumer starts at. */
  #next = 0;
  #pull: CreditedPull | undefined;
  #stopped = false;
  #wake: (() => void) | undefined;
  #restartNow = false;
  readonly #statuses: AsyncIterable<Status>;
  readonly #elections: Subscription | undefined;
  readonly #done: Promise<void>;
  /** A manager whose requests wait BRIDGE_GET_TIMEOUT_MS, made at the first bridge. */
  #bridgeJsm: Promise<JetStreamManager> | undefined;
  readonly #watch = new SilenceWatch({ next: () => this.#next, pull: () => this.#pull }, () => this.#restart());

  constructor(options: JetStreamFollowerOptions, handlers: FollowHandlers) {
    this.#options = options;
    this.#handlers = handlers;
    let started!: () => void;
    this.ready = new Promise((resolve) => (started = resolve));
    this.#done = this.#run(started);
    this.#statuses = options.nc.status();
    void this.#restartOnReconnect(this.#statuses);
    this.#elections = this.#restartOnElection();
  }

  /**
   * An event is stored at `seq` (this node appended it, or the node that did
   * said so): the follow should bring it within moments; if its pull brings
   * nothing at all meanwhile, it opens a new consumer where it stopped (SilenceWatch).
   */
  expect(seq: number): void {
    if (!this.#stopped) this.#watch.expect(seq);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#watch.stop();
    // Without this the connection keeps the iterator as a status listener until its next status event,
    // and a follow that starts and stops as sessions come and go would leave one behind each time.
    (this.#statuses as AsyncIterable<unknown> & { stop?: () => void }).stop?.();
    this.#elections?.unsubscribe();
    this.#pull?.stop();
    this.#wake?.();
    await this.#done;
  }

  async #restartOnReconnect(statuses: AsyncIterable<Status>): Promise<void> {
    try {
      for await (const status of statuses) {
        if (this.#stopped) return;
        if (status.type === 'reconnect') this.#restart();
      }
    } catch {
      // The connection closed: the follow ends with it.
    }
  }

  /**
   * The stream elected a leader (a step-down before a server's restart, a
   * server gone): a consumer made on the old one may deliver nothing more,
   * and would be noticed only after two missed heartbeats. A new one at once
   * instead. Without the right to that advisory (an operator's own
   * permissions), the heartbeats still notice.
   */
  #restartOnElection(): Subscription | undefined {
    const { nc, stream } = this.#options;
    try {
      return nc.subscribe(`$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.${stream}`, {
        callback: (err) => {
          if (!err && !this.#stopped) this.#restart();
        },
      });
    } catch {
      return undefined;
    }
  }

  /** Ends the pull of the moment: the follow opens a new consumer where it stopped, without waiting. */
  #restart(): void {
    this.#restartNow = true;
    this.#pull?.stop();
    this.#wake?.();
  }

  async #run(started: () => void): Promise<void> {
    const { nc, consumers, jsm, stream, subjectPrefix, maxBytes } = this.#options;
    const filter = `${subjectPrefix}.*.events`;
    /** Failures in a row with no event delivered between them. */
    let failures = 0;
    while (!this.#stopped) {
      const from = this.#next;
      try {
        if (this.#next === 0) {
          this.#next = (await jsm.streams.info(stream)).state.last_seq + 1;
          started();
        }
        const made = consumers.get(
          stream,
          // An attempt that timed out may still be made on the server: unused, it goes after a minute.
          { filter_subjects: filter, opt_start_seq: this.#next, inactive_threshold: ORPHAN_MS },
          () => this.#stopped,
        );
        await this.#bridge(made, filter).catch((err: unknown) => {
          // A handler threw: the consumer, when it comes, is used by nobody.
          made.then((late) => late.delete()).catch(() => {});
          throw err;
        });
        const consumer = await made;
        if (this.#stopped) break;
        const { name } = await consumer.info(true);
        const pull = (this.#pull = new CreditedPull(
          { nc, stream, consumer: name, maxBytes, heartbeatMs: HEARTBEAT_MS },
          // The consumer starts where it was asked for: what the bridge brought meanwhile comes again.
          (m, seq) => this.#deliver(m.subject, seq, m.data),
        ));
        if (this.#stopped) pull.stop();
        // Silent (the server that held the consumer died) or a skipped message: a new consumer at once.
        try {
          if ((await pull.done) !== 'stopped') this.#restartNow = true;
        } finally {
          this.#pull = undefined;
        }
        consumer.delete().catch(() => {});
      } catch (err) {
        if (this.#stopped) break;
        this.#handlers.error?.(err);
      }
      if (this.#stopped) break;
      failures = this.#next > from ? 1 : failures + 1;
      const delay = restartDelay(failures);
      if (!this.#restartNow && delay > 0) {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
          setTimeout(resolve, delay).unref();
        });
      }
      this.#restartNow = false;
    }
    started();
  }

  /** An event of the stream, the next in order; one the bridge brought already is skipped. */
  #deliver(subject: string, seq: number, data: Uint8Array): void {
    if (seq < this.#next) return;
    this.#next = seq + 1;
    const conversationId = subject.slice(this.#options.subjectPrefix.length + 1, subject.length - '.events'.length);
    if (!this.#handlers.wants(conversationId, seq)) return;
    // A copy: the message's bytes are a view of the connection's read buffer.
    this.#handlers.event(conversationId, { seq, event: parseStoredEvent(data.slice()) });
  }

  /**
   * While `made` (the consumer) has not come after BRIDGE_AFTER_MS, brings the
   * next events by direct gets (`next_by_subj` from the next sequence), which
   * any of the stream's servers answers, in order, one at a time.
   */
  async #bridge(made: Promise<unknown>, filter: string): Promise<void> {
    let settled = false;
    const done = made.then(
      () => void (settled = true),
      () => void (settled = true),
    );
    const pause = (ms: number) => Promise.race([done, new Promise<void>((resolve) => setTimeout(resolve, ms).unref())]);
    await pause(BRIDGE_AFTER_MS);
    while (!settled && !this.#stopped) {
      // One waiting on a server that is gone does not hold the consumer back once it is there.
      const m = await Promise.race([this.#nextByDirectGet(filter), done.then(() => null)]);
      if (m && !settled && !this.#stopped) this.#deliver(m.subject, m.seq, m.data);
      else await pause(BRIDGE_POLL_MS);
    }
  }

  /** The stream's first message on `filter` from the next sequence; null when there is none yet, or no answer. */
  async #nextByDirectGet(filter: string): Promise<StoredMsg | null> {
    const { nc, stream } = this.#options;
    this.#bridgeJsm ??= jetstreamManager(nc, { timeout: BRIDGE_GET_TIMEOUT_MS, checkAPI: false });
    try {
      return await (await this.#bridgeJsm).direct.getMessage(stream, { seq: this.#next, next_by_subj: filter });
    } catch {
      return null;
    }
  }
}
