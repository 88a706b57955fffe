import { sleep, type Connection } from './faults.ts';
import { WsClient, wsUrlFor, type Frame } from './wsClient.ts';

/** One user message a chatter sent, and what it learned about it. */
export interface ChatAction {
  content: string;
  clientId: string;
  /** When it was first sent. */
  sentAt: number;
  /** Frames sent for it: the first and every resend, all with the same client_id. */
  sends: number;
  /** What each attempt that went unacknowledged met: an error frame's code, `silent` or `closed`. */
  misses: string[];
  /** Its event frame: the seq it is stored at, and when the frame came. */
  ack?: { seq: number; at: number };
}

export interface ResendingChatterOptions {
  /** Pause between an acknowledgement and the next message, drawn between min and max. */
  paceMs: { min: number; max: number };
  /** How long one send waits for its event frame or an error frame before the message is sent again. */
  attemptTimeoutMs: number;
  /** Pause after an error frame or a failed reconnection, before trying again. */
  retryWaitMs: number;
  /** Every socket opened is added here, so that the test can close them all. */
  sockets: WsClient[];
}

const isMessageEvent = (frame: Frame, content: string) =>
  frame.type === 'event' &&
  frame.event.source === 'user' &&
  frame.event.type === 'message' &&
  frame.event.data.content === content;

/**
 * A ws client that keeps chatting as a real one would: one user message at a
 * time, each with a unique content and client_id, acknowledged by the event
 * frame that comes back with it. A message met by an error frame or by silence
 * is sent again with the same client_id, over a new socket opened from the
 * cursor when the old one closed, until its event frame comes (from any of its
 * sockets: a reconnection's history may bring it).
 */
export class ResendingChatter {
  readonly connections: Connection[] = [];
  readonly actions: ChatAction[] = [];
  /** Sockets opened after the first. */
  reconnects = 0;
  #giveUpAt: number | undefined;
  /** The nodes it may connect to, as a client behind a load balancer would: the first, else the next in turn. */
  readonly #wsUrls: readonly string[];
  #urlAt = 0;

  constructor(
    wsUrls: string | readonly string[],
    readonly conversationId: string,
    readonly name: string,
    readonly options: ResendingChatterOptions,
  ) {
    this.#wsUrls = typeof wsUrls === 'string' ? [wsUrls] : wsUrls;
  }

  get ws(): WsClient | undefined {
    return this.connections.at(-1)?.ws;
  }

  /** The highest seq this client received, on any of its sockets. */
  cursor(): number {
    return Math.max(0, ...this.connections.map((c) => c.ws.lastSeq(c.afterSeq)));
  }

  /**
   * Opens a socket from the cursor; true once it is caught up (a ping is
   * answered after the history). One that fails makes the next open try the next node.
   */
  async open(): Promise<boolean> {
    if (this.connections.length > 0) this.reconnects += 1;
    const afterSeq = this.cursor();
    const wsUrl = this.#wsUrls[this.#urlAt % this.#wsUrls.length]!;
    const ws = WsClient.open(wsUrlFor(wsUrl, this.conversationId, afterSeq));
    this.options.sockets.push(ws);
    this.connections.push({ ws, afterSeq });
    try {
      await ws.opened;
      await ws.waitFor((f) => f.type === 'sync', { what: 'the sync frame' });
      await ws.roundTrip();
      return true;
    } catch {
      await ws.terminate();
      this.#urlAt += 1;
      return false;
    }
  }

  /** Sends message after message until stop(); resolves once the last one is acknowledged or given up. */
  async run(): Promise<void> {
    for (let n = 0; this.#giveUpAt === undefined; n++) {
      const action: ChatAction = {
        content: `${this.name} message ${n}`,
        clientId: `${this.name}-${n}`,
        sentAt: Date.now(),
        sends: 0,
        misses: [],
      };
      this.actions.push(action);
      await this.#deliver(action);
      const { min, max } = this.options.paceMs;
      await sleep(min + Math.random() * (max - min));
    }
  }

  /** Sends nothing new; the message under way is still sent again until `giveUpAt`. */
  stop(giveUpAt: number): void {
    this.#giveUpAt = giveUpAt;
  }

  /** Messages acknowledged at or after `from`. */
  acksSince(from: number): number {
    return this.actions.filter((a) => a.ack && a.ack.at >= from).length;
  }

  async #deliver(action: ChatAction): Promise<void> {
    while (!action.ack && !(this.#giveUpAt !== undefined && Date.now() > this.#giveUpAt)) {
      if (!this.ws?.isOpen && !(await this.open())) {
        await sleep(this.options.retryWaitMs);
        continue;
      }
      // An earlier send may have been stored after all: its frame came late, or with the history of a new socket.
      if (action.sends > 0 && (action.ack = this.#ackOf(action.content))) return;
      const ws = this.ws!;
      const from = ws.frames.length;
      ws.send({
        type: 'user_action',
        action: { type: 'message', content: action.content },
        client_id: action.clientId,
      });
      action.sends += 1;
      const outcome = await ws
        .waitFor((f) => isMessageEvent(f, action.content) || f.type === 'error', {
          from,
          timeoutMs: this.options.attemptTimeoutMs,
          what: `the outcome of ${action.clientId}`,
        })
        .catch(() => undefined);
      if (outcome?.type === 'event') {
        action.ack = { seq: outcome.seq, at: Date.now() };
        return;
      }
      action.misses.push(outcome?.type === 'error' ? outcome.code : ws.isOpen ? 'silent' : 'closed');
      if (outcome?.type === 'error') await sleep(this.options.retryWaitMs);
    }
  }

  #ackOf(content: string): ChatAction['ack'] {
    for (const { ws } of this.connections) {
      const frame = ws.frames.find((f) => isMessageEvent(f, content));
      if (frame?.type === 'event') return { seq: frame.seq, at: Date.now() };
    }
    return undefined;
  }
}
