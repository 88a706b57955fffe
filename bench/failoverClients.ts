// The failover bench's clients: a ws client per conversation on a surviving
// node, which notes when each stored event reaches it, and the REST calls,
// among them a message sent again (same client_id) until a node accepts it.
import { setTimeout as sleep } from 'node:timers/promises';
import { protocolClient, type ProtocolClient } from '../src/client/index.ts';
import { BenchSocket } from './benchSocket.ts';

/** A stored event as a client sees it. */
export interface SeenEvent {
  seq: number;
  type: string;
  source: string;
  state: string | undefined;
  content: string | undefined;
}

/** An event as the server sends it, in a frame or a REST page: what the bench reads of it. */
export interface WireEvent {
  type: string;
  source: string;
  data?: { state?: string; content?: string };
}

export function seenEvent(seq: number, event: WireEvent): SeenEvent {
  return { seq, type: event.type, source: event.source, state: event.data?.state, content: event.data?.content };
}

/** When (ms, wall clock) an event reached the client, and its cursor. */
export interface Arrival {
  at: number;
  seq: number;
}

interface Waiter {
  test: (e: SeenEvent) => boolean;
  resolve: (arrival: Arrival) => void;
  reject: (err: Error) => void;
}

/** The scripted agent quotes the message it answers. */
export const answers = (content: string) => (e: SeenEvent) =>
  e.source === 'agent' && e.type === 'message' && (e.content?.startsWith(`You said: "${content}".`) ?? false);

export const awaitingInput = (e: SeenEvent) => e.type === 'agent_state_changed' && e.state === 'awaiting_user_input';

/** One ws client on a conversation, from its first event; `arrival` tells when an event reached it. */
export class ConversationWatch {
  readonly conversationId: string;
  #client: ProtocolClient<BenchSocket> | null = null;
  #closing = false;
  readonly #seen: Array<{ at: number; event: SeenEvent }> = [];
  #waiters: Waiter[] = [];
  #failure: Error | null = null;

  private constructor(conversationId: string) {
    this.conversationId = conversationId;
  }

  /** Opens `/ws` on the whole history and resolves once the `sync` frame arrived. */
  static open(wsBase: string, token: string, conversationId: string): Promise<ConversationWatch> {
    const watch = new ConversationWatch(conversationId);
    return new Promise((resolve, reject) => {
      let synced = false;
      const failed = (err: Error) => (synced ? watch.#fail(err) : reject(err));
      watch.#client = protocolClient({
        WebSocket: BenchSocket,
        url: `${wsBase}/ws?conversation_id=${conversationId}&token=${token}`,
        reconnect: false,
        handlers: {
          sync: () => {
            synced = true;
            resolve(watch);
          },
          event: (frame) => watch.#arrived(Date.now(), seenEvent(frame.seq, frame.event as WireEvent)),
          error: (frame) => watch.#fail(new Error(`${conversationId}: error frame ${frame.code}`)),
          invalid: (frame) => failed(new Error(`${conversationId}: ${frame.problem}: ${frame.raw.slice(0, 300)}`)),
          socketError: (event) => failed((event as { error?: Error }).error ?? new Error('socket error')),
          close: ({ code }) => {
            if (!watch.#closing) failed(new Error(`the ws client of ${conversationId} was closed (${code})`));
          },
        },
      });
    });
  }

  /** The first event after `afterSeq` that passes `test`, when it arrived; waits for it until `deadline`. */
  arrival(test: (e: SeenEvent) => boolean, deadline: number, what: string, afterSeq = -1): Promise<Arrival> {
    const match = (e: SeenEvent) => e.seq > afterSeq && test(e);
    const seen = this.#seen.find((s) => match(s.event));
    if (seen) return Promise.resolve({ at: seen.at, seq: seen.event.seq });
    if (this.#failure) return Promise.reject(this.#failure);
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { test: match, resolve, reject };
      const timer = setTimeout(
        () => {
          this.#waiters = this.#waiters.filter((w) => w !== waiter);
          const last = this.#seen.slice(-4).map(({ event: e }) => `${e.seq} ${e.source} ${e.type} ${e.state ?? ''}`);
          reject(new Error(`${this.conversationId}: no ${what}; the last events it got: ${last.join(', ') || 'none'}`));
        },
        Math.max(0, deadline - Date.now()),
      );
      waiter.resolve = (arrival) => (clearTimeout(timer), resolve(arrival));
      waiter.reject = (err) => (clearTimeout(timer), reject(err));
      this.#waiters.push(waiter);
    });
  }

  close(): void {
    this.#closing = true;
    this.#client?.socket?.terminate();
  }

  #arrived(at: number, event: SeenEvent): void {
    this.#seen.push({ at, event });
    const [done, waiting] = partition(this.#waiters, (w) => w.test(event));
    this.#waiters = waiting;
    for (const w of done) w.resolve({ at, seq: event.seq });
  }

  #fail(err: Error): void {
    this.#failure ??= err;
    for (const w of this.#waiters.splice(0)) w.reject(err);
  }
}

function partition<T>(items: readonly T[], test: (item: T) => boolean): [T[], T[]] {
  return [items.filter(test), items.filter((item) => !test(item))];
}

/** One REST call as the token's user: its status and parsed body. */
export async function rest<T>(
  base: string,
  token: string,
  method: 'GET' | 'POST',
  path: string,
  body: unknown,
  timeoutMs: number,
): Promise<{ status: number; body: T }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T };
}

/** `POST /api/conversations` with `{}`: the new conversation's id. */
export async function createConversation(base: string, token: string, timeoutMs: number): Promise<string> {
  const res = await rest<{ conversation_id: string }>(base, token, 'POST', '/api/conversations', {}, timeoutMs);
  if (res.status !== 201) throw new Error(`POST /api/conversations answered ${res.status}`);
  return res.body.conversation_id;
}

/** Reads the conversation's state through `base` every 25 ms until it is `state`. */
export async function untilState(
  base: string,
  token: string,
  conversationId: string,
  state: string,
  deadline: number,
): Promise<void> {
  for (;;) {
    const res = await rest<{ state: string }>(
      base,
      token,
      'GET',
      `/api/conversations/${conversationId}`,
      undefined,
      10_000,
    );
    if (res.status === 200 && res.body.state === state) return;
    if (Date.now() > deadline)
      throw new Error(`${conversationId} did not reach ${state} (last: ${res.status} ${res.body.state})`);
    await sleep(25);
  }
}

export interface Accepted {
  /** When (ms, wall clock) a node answered 202. */
  at: number;
  /** POSTs sent, the accepted one included. */
  attempts: number;
  /** What the refused ones got (status or error), in order. */
  refusals: string[];
}

/**
 * Sends a user message with a client_id, again (same id: the log stores it
 * once) after any error, timeout or non-202 answer, each time through the
 * next of `bases`, until one answers 202 or `deadline` passes.
 */
export async function sendUntilAccepted(
  bases: readonly string[],
  token: string,
  conversationId: string,
  message: { content: string; clientId: string },
  attemptTimeoutMs: number,
  deadline: number,
): Promise<Accepted> {
  const refusals: string[] = [];
  const body = { action: { type: 'message', content: message.content }, client_id: message.clientId };
  for (let attempt = 0; Date.now() < deadline; attempt++) {
    const base = bases[attempt % bases.length]!;
    const timeoutMs = Math.max(1, Math.min(attemptTimeoutMs, deadline - Date.now()));
    try {
      const res = await rest(base, token, 'POST', `/api/conversations/${conversationId}/actions`, body, timeoutMs);
      if (res.status === 202) return { at: Date.now(), attempts: attempt + 1, refusals };
      refusals.push(`HTTP ${res.status} ${JSON.stringify(res.body)}`);
    } catch (err) {
      refusals.push(err instanceof Error ? err.message : String(err));
    }
    await sleep(100);
  }
  throw new Error(`${conversationId}: no node accepted "${message.content}" (${refusals.join('; ')})`);
}
