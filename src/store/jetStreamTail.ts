import type { Consumer, ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { LoggedEvent, StoredEvent } from '../protocol/index.ts';
import type { EventTail } from './eventLog.ts';
import { StoreUnavailableError } from './errors.ts';
import { toStoreError } from './natsErrors.ts';

const decoder = new TextDecoder();

/**
 * A stored message as a LoggedEvent. JSON.parse only: events were validated
 * before they were appended, and this is the hot path of every replay.
 */
export function toLoggedEvent(m: JsMsg): LoggedEvent {
  try {
    return { seq: m.seq, event: JSON.parse(decoder.decode(m.data)) as StoredEvent };
  } catch (err) {
    throw new Error(`stream message ${m.seq} on ${m.subject} is not JSON`, { cause: err });
  }
}

/**
 * A tail over an ordered JetStream consumer that starts at `afterSeq + 1`.
 * The consumer's start sequence is fixed when it is created, and an ordered
 * consumer recreates itself at the next sequence after any hiccup, so history
 * and live events arrive as one ordered run with no seam to fall through.
 */
export class JetStreamTail implements EventTail {
  readonly #ready: Promise<void>;
  #consumer: Consumer | undefined;
  #messages: ConsumerMessages | undefined;
  #iterator: AsyncGenerator<LoggedEvent, void, undefined> | undefined;
  #stopped = false;

  constructor(
    open: () => Promise<Consumer>,
    private readonly conversationId: string,
    /** The bytes one pull may ask for (see pullBytes). */
    private readonly maxBytes: number,
  ) {
    this.#ready = this.#start(open);
    // Failures reach the reader through next(); this only avoids an unhandled rejection.
    this.#ready.catch(() => {});
  }

  async #start(open: () => Promise<Consumer>): Promise<void> {
    const consumer = await open();
    this.#consumer = consumer;
    if (this.#stopped) return;
    this.#messages = await consumer.consume({ max_bytes: this.maxBytes, expires: 30_000 });
    if (this.#stopped) this.#messages.stop();
  }

  [Symbol.asyncIterator](): AsyncIterator<LoggedEvent> {
    this.#iterator ??= this.#iterate();
    return this.#iterator;
  }

  async *#iterate(): AsyncGenerator<LoggedEvent, void, undefined> {
    try {
      try {
        await this.#ready;
      } catch (err) {
        throw toStoreError(err, `starting the tail of conversation ${this.conversationId}`);
      }
      const messages = this.#messages;
      if (!messages) return;
      try {
        for await (const m of messages) {
          // stop() queues behind messages already received; they must not leak out.
          if (this.#stopped) return;
          yield toLoggedEvent(m);
        }
      } catch (err) {
        if (this.#stopped) return;
        throw toStoreError(err, `tailing conversation ${this.conversationId}`);
      }
      if (!this.#stopped) {
        throw new StoreUnavailableError(`tail of conversation ${this.conversationId} ended: NATS connection closed`);
      }
    } finally {
      await this.stop();
    }
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#messages?.stop();
    await this.#ready.catch(() => {});
    this.#messages?.stop();
    // Ordered consumers are ephemeral; deleting spares the server a 5 minute idle wait.
    this.#consumer?.delete().catch(() => {});
  }
}
