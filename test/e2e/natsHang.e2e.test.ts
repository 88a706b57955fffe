import { afterEach, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../src/protocol/index.ts';
import {
  answersTo,
  contentCounts,
  describeLog,
  duplicatedContents,
  embeddedNatsPid,
  idProblem,
  ReadyzProbe,
  sleep,
  unanswered,
  untilQuiet,
  userMessages,
} from '../support/faults.ts';
import { createConversation, eventually, http, startServer, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor, type Frame } from '../support/wsClient.ts';

const CONVERSATIONS = 10;
const CLIENTS_PER_CONVERSATION = 2;
/** Sending before the embedded nats-server is killed, then after it. */
const BEFORE_FAULT_MS = 3_000;
const AFTER_FAULT_MS = 8_000;
const MAX_ACTIONS_PER_CLIENT = 150;
/** Pause between two actions of one client (each waits for the outcome of the one before). */
const PACE_MS = { min: 50, max: 100 };
/** How long an action may take to come back as its event frame or an error frame. */
const OUTCOME_TIMEOUT_MS = 30_000;
/** After an action's event frame: how long to wait for what follows it (its state fact, or an error if that failed). */
const SETTLE_TIMEOUT_MS = 10_000;
/** Retries of an action that got an error frame (same client_id, same content), waiting RETRY_WAIT_MS × n before the n-th. */
const MAX_RETRIES = 8;
const RETRY_WAIT_MS = 250;
/** Reconnection attempts of a ws client whose socket was closed. */
const MAX_RECONNECTS = 60;

interface RetryAnswer {
  /** HTTP status; 0 when no answer came (connection refused or timed out). */
  status: number;
  code?: string;
}

/** One user message a client sent, and everything it learned about it. */
interface Action {
  content: string;
  clientId: string;
  sentAt: number;
  /** What the ws answered: its event frame, an error frame, nothing in time, or the socket closed first. */
  wsOutcome: 'event' | 'error' | 'silent' | 'closed' | 'pending';
  /** Error frames for it: the one that answered it, or one after its event frame (its state fact failed). */
  errorFrames: string[];
  /** REST retries that did not answer 202. */
  failedRetries: RetryAnswer[];
  /** A REST retry's 202: the seq of the stored message, and whether this retry stored it or an earlier attempt had. */
  restAck?: { seq: number; duplicate: boolean };
}

interface Connection {
  ws: WsClient;
  /** The cursor it was opened with. */
  afterSeq: number;
}

const servers: ServerProcess[] = [];
const sockets: WsClient[] = [];

afterEach(async () => {
  await Promise.all(sockets.splice(0).map((s) => s.terminate()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

const isMessageEvent = (frame: Frame, content: string) =>
  frame.type === 'event' && frame.event.source === 'user' && frame.event.type === 'message' && frame.event.data.content === content;

/**
 * A ws client that keeps chatting: one user message at a time, each with a
 * unique content and client_id, waiting for its outcome before the next.
 * Actions answered by an error frame are retried over REST with the same
 * client_id in the background; a closed socket is reopened with the cursor.
 */
class Chatter {
  readonly connections: Connection[] = [];
  readonly actions: Action[] = [];
  readonly #retries: Array<Promise<void>> = [];
  reconnects = 0;

  constructor(
    readonly server: ServerProcess,
    readonly conversationId: string,
    readonly name: string,
  ) {}

  get ws(): WsClient | undefined {
    return this.connections.at(-1)?.ws;
  }

  /** The highest seq this client received, on any of its connections. */
  cursor(): number {
    return Math.max(0, ...this.connections.map((c) => c.ws.lastSeq(c.afterSeq)));
  }

  /** Opens a socket from the cursor; caught up once a ping made its round trip. Retries a bounded number of times. */
  async open(): Promise<void> {
    let last: unknown;
    for (let attempt = 0; attempt < MAX_RECONNECTS; attempt++) {
      const afterSeq = this.cursor();
      const ws = WsClient.open(wsUrlFor(this.server.wsUrl, this.conversationId, afterSeq));
      sockets.push(ws);
      this.connections.push({ ws, afterSeq });
      try {
        await ws.opened;
        await ws.waitFor((f) => f.type === 'sync', { what: 'the sync frame', timeoutMs: 15_000 });
        // Pings are answered once the history was sent: caught up.
        await ws.roundTrip(30_000);
        return;
      } catch (err) {
        last = err;
        await ws.terminate();
        await sleep(250);
      }
    }
    throw new Error(`${this.name} could not reconnect: ${String(last)}`);
  }

  async run(stopAt: number): Promise<void> {
    for (let n = 0; n < MAX_ACTIONS_PER_CLIENT && Date.now() < stopAt; n++) {
      if (!this.ws?.isOpen) {
        this.reconnects += 1;
        await this.open();
      }
      const action: Action = {
        content: `${this.name} message ${n}`,
        clientId: `${this.name}-${n}`,
        sentAt: Date.now(),
        wsOutcome: 'pending',
        errorFrames: [],
        failedRetries: [],
      };
      this.actions.push(action);
      await this.#send(action);
      if (action.wsOutcome !== 'event') this.#retries.push(this.#retry(action));
      await sleep(PACE_MS.min + Math.random() * (PACE_MS.max - PACE_MS.min));
    }
    await Promise.all(this.#retries);
  }

  async #send(action: Action): Promise<void> {
    const ws = this.ws!;
    const from = ws.frames.length;
    ws.send({ type: 'user_action', action: { type: 'message', content: action.content }, client_id: action.clientId });
    let outcome: Frame;
    try {
      outcome = await ws.waitFor((f) => isMessageEvent(f, action.content) || f.type === 'error', {
        from,
        timeoutMs: OUTCOME_TIMEOUT_MS,
        what: `the outcome of ${action.clientId}`,
      });
    } catch {
      action.wsOutcome = ws.isOpen ? 'silent' : 'closed';
      return;
    }
    if (outcome.type === 'error') {
      action.wsOutcome = 'error';
      action.errorFrames.push(outcome.code);
      return;
    }
    action.wsOutcome = 'event';
    // The session appends the message's state fact in the same step, before
    // anything else of this conversation: the next frame is that fact, or an
    // error frame when it failed, or (no state change) whatever came next.
    // Waiting for it keeps a late error from being pinned on the next action.
    const at = ws.frames.indexOf(outcome);
    try {
      const next = await ws.waitFor((f) => f.type === 'event' || f.type === 'error', { from: at + 1, timeoutMs: SETTLE_TIMEOUT_MS });
      if (next.type === 'error') action.errorFrames.push(next.code);
    } catch {
      // Nothing followed in time, or the socket closed: the action is done either way.
    }
  }

  async #retry(action: Action): Promise<void> {
    for (let n = 1; n <= MAX_RETRIES; n++) {
      await sleep(RETRY_WAIT_MS * n);
      const res = await http<{ seq: number; duplicate: boolean; error?: { code: string } }>(
        this.server.baseUrl,
        'POST',
        `/api/conversations/${this.conversationId}/actions`,
        { action: { type: 'message', content: action.content }, client_id: action.clientId },
      ).catch(() => ({ status: 0, body: undefined }));
      if (res.status === 202 && res.body) {
        action.restAck = { seq: res.body.seq, duplicate: res.body.duplicate };
        return;
      }
      action.failedRetries.push({ status: res.status, ...(res.body?.error && { code: res.body.error.code }) });
      if (res.status !== 0 && res.status < 500) return;
    }
  }
}

/** Seq of the event frame each content came back in, over all of a client's connections. */
function framedSeqs(chatter: Chatter): Map<string, number[]> {
  const seqs = new Map<string, number[]>();
  for (const { ws } of chatter.connections) {
    for (const f of ws.events()) {
      if (f.event.source !== 'user' || f.event.type !== 'message') continue;
      seqs.set(f.event.data.content, [...(seqs.get(f.event.data.content) ?? []), f.seq]);
    }
  }
  return seqs;
}

/** What a connection missed or got wrong compared with the log: it must have every event after its cursor, once, in order. */
function deliveryProblem(connection: Connection, log: readonly LoggedEvent[], wholeLog: boolean): string | null {
  const got = connection.ws.events();
  if (got.length === 0 && !wholeLog) return null;
  const through = wholeLog ? (log.at(-1)?.seq ?? 0) : got.at(-1)!.seq;
  const expected = log.filter((e) => e.seq > connection.afterSeq && e.seq <= through);
  const gotSeqs = got.map((f) => f.seq);
  const expectedSeqs = expected.map((e) => e.seq);
  if (gotSeqs.join() !== expectedSeqs.join()) {
    const missing = expectedSeqs.filter((s) => !gotSeqs.includes(s));
    const extra = gotSeqs.filter((s, i) => !expectedSeqs.includes(s) || gotSeqs.indexOf(s) !== i);
    const detail = missing.map((s) => describeLog(log.filter((e) => e.seq === s))).join(' | ');
    return `after_seq=${connection.afterSeq} through ${through}: missing seqs [${missing.join(', ')}] (${detail}), extra or repeated [${extra.join(', ')}]`;
  }
  const differing = got.filter((f, i) => JSON.stringify(f.event) !== JSON.stringify(expected[i]!.event));
  return differing.length === 0 ? null : `frames differ from the log at seqs ${differing.map((f) => f.seq).join(', ')}`;
}

describe('a hung NATS server', () => {
  it('sends an open ws client the message that a hung nats-server stored after its acknowledgement timed out', async (ctx) => {
    const server = await startServer({ env: { TETHER_AGENT_DELAY_MS: '0' } });
    servers.push(server);
    ctx.onTestFailed(() => console.log(`tether stderr (tail):\n${server.stderr().slice(-4_000)}`));
    const id = await createConversation(server.baseUrl);
    await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000, stableMs: 100 });
    const ws = await WsClient.connect(wsUrlFor(server.wsUrl, id, 0));
    sockets.push(ws);
    await ws.roundTrip();
    const connection: Connection = { ws, afterSeq: 0 };

    // A hung nats-server (not dead: its socket stays open) takes the publish but answers only once it runs again.
    const nats = embeddedNatsPid(server.dataDir);
    expect(nats).toBeDefined();
    process.kill(nats!, 'SIGSTOP');
    let error: Frame;
    try {
      ws.sendMessage('sent while nats-server hangs', 'hung-1');
      error = await ws.waitFor((f) => f.type === 'error' || isMessageEvent(f, 'sent while nats-server hangs'), { timeoutMs: 20_000 });
    } finally {
      process.kill(nats!, 'SIGCONT');
    }
    // Tether gave up waiting: "it may or may not be stored".
    expect(error).toMatchObject({ type: 'error', code: 'STORE_UNAVAILABLE' });

    ws.sendMessage('sent after it runs again', 'after-1');
    await ws.waitFor((f) => isMessageEvent(f, 'sent after it runs again'), { timeoutMs: 20_000, what: 'the next message back' });
    const logs = await untilQuiet(server.baseUrl, [id], { timeoutMs: 30_000 });
    await ws.roundTrip();
    const log = logs.get(id)!;
    // It was stored after all, once.
    expect(contentCounts(log).get('sent while nats-server hangs')).toBe(1);
    expect(idProblem(log)).toBeNull();
    // The socket stayed open through it all, so it must have every stored event once, in order, up to the end of the log.
    expect(ws.isOpen).toBe(true);
    expect(deliveryProblem(connection, log, true)).toBeNull();
  }, 60_000);
});
