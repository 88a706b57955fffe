import { protocolClient, type EventFrame, type ProtocolClient } from '../src/client/index.ts';
import { BenchSocket } from './benchSocket.ts';
import type { PacedMember } from './latencyPacing.ts';

/** An event frame as received: its cursor and the event's JSON text as the server sent it. */
export interface ReceivedEvent {
  seq: number;
  type: string;
  source: string;
  state: string | undefined;
  eventJson: string;
}

interface EventFrameShape {
  type: 'event';
  seq: number;
  event: { type: string; source: string; data?: { state?: string; content?: string } };
}

const FILLER = 'The quick brown fox jumps over the lazy dog while the benchmark keeps the agent busy. ';

/** The text of a client's i-th message: about 120 characters, distinct per client and index. */
export function messageText(client: number, index: number): string {
  return `bench client ${client} message ${index}: ${FILLER}`.slice(0, 120);
}

/**
 * A lean WebSocket client for the append benchmark. It keeps at most `window`
 * user messages in flight (sent, but not yet back as a stored `message` event)
 * and is done when all its messages are back and the agent has left `running`
 * after the last of them. Any `error` frame or early close fails the run, and
 * so does a user message that is not the conversation's next one (every client
 * of a conversation checks every user message: once each, in order).
 */
export class BenchClient implements PacedMember {
  readonly received: ReceivedEvent[] = [];
  onArrival: ((k: number) => void) | null = null;
  readonly failed: Promise<never>;
  #rejectFailed: (err: Error) => void = () => {};
  readonly #client: ProtocolClient<BenchSocket>;
  readonly #index: number;
  #closing = false;
  #sent = 0;
  #echoed = 0;
  #lastUserSeq = -1;
  #settled: { seq: number; state: string } | null = null;
  #finish: { resolve: () => void; reject: (err: Error) => void } | null = null;
  #plan = { messages: 0, window: 1, settle: true };
  #failure: Error | null = null;
  #waitingFor: { seq: number; resolve: () => void } | null = null;

  private constructor(client: ProtocolClient<BenchSocket>, index: number) {
    this.#client = client;
    this.#index = index;
    this.failed = new Promise<never>((_, reject) => (this.#rejectFailed = reject));
    this.failed.catch(() => undefined);
  }

  /** Opens `/ws` after the given cursor (`auth`: extra query, who is calling) and resolves once the `sync` frame arrived. */
  static connect(
    baseWsUrl: string,
    auth: string,
    conversationId: string,
    afterSeq: number,
    index: number,
  ): Promise<BenchClient> {
    const url = `${baseWsUrl}/ws?${auth}&conversation_id=${conversationId}&after_seq=${afterSeq}`;
    return new Promise((resolve, reject) => {
      let synced = false;
      const failed = (err: Error) => (synced ? client.#fail(err) : reject(err));
      const client: BenchClient = new BenchClient(
        protocolClient({
          WebSocket: BenchSocket,
          url,
          reconnect: false,
          handlers: {
            sync: () => {
              synced = true;
              resolve(client);
            },
            event: (frame, text) => client.#onEvent(frame, text),
            error: (_frame, text) => client.#fail(new Error(`server error frame: ${text}`)),
            invalid: (frame) =>
              failed(new Error(`ws of ${conversationId}: ${frame.problem}: ${frame.raw.slice(0, 300)}`)),
            socketError: (event) => failed((event as { error?: Error }).error ?? new Error('socket error')),
            close: ({ code, reason }) => {
              if (!client.#closing) failed(new Error(`ws of ${conversationId} closed (${code} ${reason})`));
            },
          },
        }),
        index,
      );
    });
  }

  /** Sends `messages` user messages, at most `window` in flight; resolves when everything they caused is back. */
  run(messages: number, window: number, settle = true): Promise<void> {
    this.#plan = { messages, window, settle };
    return new Promise((resolve, reject) => {
      this.#finish = { resolve, reject };
      if (this.#failure) reject(this.#failure);
      else this.#topUp();
    });
  }

  /** Stream sequence of the last event frame received (the cursor), -1 before any. */
  get lastSeq(): number {
    return this.received.at(-1)?.seq ?? -1;
  }

  /** For a client that only watches: resolves once an event frame at or past `seq` has arrived. */
  until(seq: number): Promise<void> {
    if (this.lastSeq >= seq) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.#waitingFor = { seq, resolve };
      this.#finish = { resolve: () => {}, reject };
      if (this.#failure) reject(this.#failure);
    });
  }

  /** Sends the conversation's k-th user message now, whatever is in flight (paced runs). */
  sendMessage(k: number): void {
    // No client_id: what is measured stores each message once without JetStream's dedupe.
    this.#client.send({ type: 'message', content: messageText(this.#index, k) }, null);
  }

  close(): void {
    this.#closing = true;
    this.#client.close(1000);
  }

  #topUp(): void {
    const { messages, window } = this.#plan;
    while (this.#sent < messages && this.#sent - this.#echoed < window) this.sendMessage(this.#sent++);
  }

  #onEvent(frame: EventFrame, text: string): void {
    const { seq, event } = frame as unknown as EventFrameShape;
    const state = event.type === 'agent_state_changed' ? event.data?.state : undefined;
    // The event's own JSON, cut from the frame text: what the server sent, byte for byte.
    const eventJson = text.slice(text.indexOf('"event":') + 8, -1);
    this.received.push({ seq, type: event.type, source: event.source, state, eventJson });
    if (event.type === 'message' && event.source === 'user') {
      const k = this.#echoed++;
      if (event.data?.content !== messageText(this.#index, k))
        return this.#fail(new Error(`user message ${k} of client ${this.#index} came back as ${eventJson}`));
      this.#lastUserSeq = seq;
      this.onArrival?.(k);
      this.#topUp();
    }
    if (state !== undefined) this.#settled = { seq, state };
    if (this.#waitingFor && seq >= this.#waitingFor.seq) {
      this.#waitingFor.resolve();
      this.#waitingFor = null;
    }
    if (this.#done()) this.#finish?.resolve();
  }

  /**
   * All messages are back and (when the plan settles) the agent stopped running
   * after the last one: nothing more will come.
   */
  #done(): boolean {
    const settled = this.#settled;
    if (!this.#plan.settle) return this.#echoed === this.#plan.messages;
    return (
      this.#echoed === this.#plan.messages &&
      settled !== null &&
      settled.seq > this.#lastUserSeq &&
      settled.state !== 'running'
    );
  }

  #fail(err: Error): void {
    this.#failure ??= err;
    this.#rejectFailed(err);
    this.#finish?.reject(err);
  }
}
