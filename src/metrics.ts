import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import {
  VersionConflictError,
  type AppendOptions,
  type AppendResult,
  type EventLog,
  type LogSubscription,
} from './store/index.ts';
import type { LoggedEvent, StoredEvent } from '../protocol/index.ts';

/** What the metrics read at each scrape, from the parts that keep it. */
export interface MetricSources {
  liveSessions(): number;
  connections(): number;
  ownedConversations(): number;
  takeovers(): number;
  forwardedActions(): number;
}

const NO_SOURCES: MetricSources = {
  liveSessions: () => 0,
  connections: () => 0,
  ownedConversations: () => 0,
  takeovers: () => 0,
  forwardedActions: () => 0,
};

// From a local append (~1 ms) to one waiting out a NATS leader election (seconds).
const APPEND_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * A node's metrics in the Prometheus text format (`GET /metrics`), on a
 * registry of its own (several Tethers may share a process in tests).
 * Counts only: no conversation id, user or content in any label.
 */
export class TetherMetrics {
  readonly registry = new Registry();
  readonly #appends: Counter;
  readonly #appendSeconds: Histogram;
  readonly #natsReconnects: Counter;
  #sources: MetricSources = NO_SOURCES;

  constructor(options: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    const read = (pick: (s: MetricSources) => number) =>
      function (this: Gauge) {
        this.set(pick(sources()));
      };
    const sources = () => this.#sources;
    new Gauge({
      name: 'tether_live_sessions',
      help: 'Conversations whose session is in this node’s memory.',
      registers,
      collect: read((s) => s.liveSessions()),
    });
    new Gauge({
      name: 'tether_connections',
      help: 'Open WebSocket connections.',
      registers,
      collect: read((s) => s.connections()),
    });
    new Gauge({
      name: 'tether_owned_conversations',
      help: 'Conversations this node holds the owner record of.',
      registers,
      collect: read((s) => s.ownedConversations()),
    });
    // Kept by their owners as running totals; a counter set from them at each scrape.
    const total = (pick: (s: MetricSources) => number) =>
      function (this: Counter) {
        this.reset();
        this.inc(pick(sources()));
      };
    new Counter({
      name: 'tether_takeovers_total',
      help: 'Conversations this node took over from a node whose heartbeat lapsed.',
      registers,
      collect: total((s) => s.takeovers()),
    });
    new Counter({
      name: 'tether_forwarded_actions_total',
      help: 'Requests this node forwarded to the node that owns their conversation.',
      registers,
      collect: total((s) => s.forwardedActions()),
    });
    this.#appends = new Counter({
      name: 'tether_appends_total',
      help: 'Appends this node asked of the log, by result: ok, duplicate (nothing stored), conflict, error.',
      labelNames: ['result'],
      registers,
    });
    this.#appendSeconds = new Histogram({
      name: 'tether_append_seconds',
      help: 'Time from an append’s start to its acknowledgement by JetStream (or its failure).',
      buckets: APPEND_BUCKETS,
      registers,
    });
    this.#natsReconnects = new Counter({
      name: 'tether_nats_reconnects_total',
      help: 'Times the NATS connection came back after it dropped.',
      registers,
    });
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'tether_' });
  }

  /** Where the gauges and running totals are read from (the parts are built after the metrics). */
  observe(sources: MetricSources): void {
    this.#sources = sources;
  }

  natsReconnected(): void {
    this.#natsReconnects.inc();
  }

  /** The log with every append counted and timed. */
  measure(log: EventLog): EventLog {
    return new MeasuredLog(log, this.#appends, this.#appendSeconds);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}

class MeasuredLog implements EventLog {
  readonly #log: EventLog;
  readonly #appends: Counter;
  readonly #seconds: Histogram;

  constructor(log: EventLog, appends: Counter, seconds: Histogram) {
    this.#log = log;
    this.#appends = appends;
    this.#seconds = seconds;
  }

  async append(event: StoredEvent, options: AppendOptions): Promise<AppendResult> {
    const done = this.#seconds.startTimer();
    let result = 'error';
    try {
      const appended = await this.#log.append(event, options);
      result = appended.duplicate ? 'duplicate' : 'ok';
      return appended;
    } catch (err) {
      if (err instanceof VersionConflictError) result = 'conflict';
      throw err;
    } finally {
      done();
      this.#appends.inc({ result });
    }
  }

  read(...args: Parameters<EventLog['read']>) {
    return this.#log.read(...args);
  }

  lastSeq(conversationId: string): Promise<number> {
    return this.#log.lastSeq(conversationId);
  }

  last(conversationId: string): Promise<LoggedEvent | undefined> {
    return this.#log.last(conversationId);
  }

  subscribe(...args: Parameters<EventLog['subscribe']>): LogSubscription {
    return this.#log.subscribe(...args);
  }

  purge(conversationId: string): Promise<void> {
    return this.#log.purge(conversationId);
  }

  expectDelivery(conversationId: string, seq: number): void {
    this.#log.expectDelivery?.(conversationId, seq);
  }
}
