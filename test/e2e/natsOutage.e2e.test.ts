import { describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import {
  answersTo,
  contentCounts,
  deliveryProblem,
  describeLog,
  duplicatedContents,
  embeddedNatsPid,
  idProblem,
  isUserMessageFrame,
  ReadyzProbe,
  sleep,
  unanswered,
  untilQuiet,
  userMessages,
  type Connection,
} from '../support/faults.ts';
import { createConversation, http, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';
import { wsUrlFor, type Frame, type WsClient } from '../support/wsClient.ts';

const CONVERSATIONS = 10;
const CLIENTS_PER_CONVERSATION = 2;
/** Sending before the embedded nats-server is killed, then after it. */
const BEFORE_FAULT_MS = 2_000;
/** The embedded nats-server is back within about a second (readyz_503_ms_after_kill): four cover it and more. */
const AFTER_FAULT_MS = 4_000;
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

const e2e = useE2e();

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
      const ws = e2e.open(wsUrlFor(this.server.wsUrl, this.conversationId, afterSeq));
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
      outcome = await ws.waitFor((f) => isUserMessageFrame(f, action.content) || f.type === 'error', {
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
      const next = await ws.waitFor((f) => f.type === 'event' || f.type === 'error', {
        from: at + 1,
        timeoutMs: SETTLE_TIMEOUT_MS,
      });
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

describe('a NATS outage under steady traffic', () => {
  it('loses no acknowledged message, stores none twice and leaves no message unanswered when the embedded nats-server is killed while 20 ws clients chat', async (ctx) => {
    const startedAt = Date.now();
    const server = await e2e.start({
      env: { TETHER_AGENT_DELAY_MS: '0', TETHER_MAX_RUNNING_PER_USER: String(CONVERSATIONS) },
    });
    ctx.onTestFailed(() => console.log(`tether stderr (tail):\n${server.stderr().slice(-6_000)}`));

    const ids = await Promise.all(Array.from({ length: CONVERSATIONS }, () => createConversation(server.baseUrl)));
    await untilQuiet(server.baseUrl, ids, { timeoutMs: 30_000, stableMs: 100 });
    const chatters = ids.flatMap((id, c) =>
      Array.from(
        { length: CLIENTS_PER_CONVERSATION },
        (_, k) => new Chatter(server, id, `conversation ${c} client ${k}`),
      ),
    );
    await Promise.all(chatters.map((c) => c.open()));
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);

    const readyz = new ReadyzProbe(server.baseUrl, 50);
    const sendingFrom = Date.now();
    const runs = chatters.map((c) => c.run(sendingFrom + BEFORE_FAULT_MS + AFTER_FAULT_MS));
    await sleep(BEFORE_FAULT_MS);
    const natsBefore = embeddedNatsPid(server.dataDir);
    expect(natsBefore).toBeDefined();
    process.kill(natsBefore!, 'SIGKILL');
    const killedAt = Date.now();

    await Promise.all(runs);
    const sendingDone = Date.now();
    await until(
      async () => ((await http(server.baseUrl, 'GET', '/readyz')).status === 200 ? true : undefined),
      'readyz back to 200',
      SERVER_WAIT,
    );
    await readyz.stop();
    const logs = await untilQuiet(server.baseUrl, ids, { timeoutMs: 60_000 });
    // Every open socket has received all that was sent to it.
    await Promise.all(chatters.map((c) => (c.ws?.isOpen ? c.ws.roundTrip(15_000) : Promise.resolve())));

    const actions = chatters.flatMap((c) => c.actions.map((a) => ({ chatter: c, action: a })));
    const notReady = readyz.notReadyWindow();
    const figures = {
      clients: chatters.length,
      conversations: ids.length,
      actions: actions.length,
      acknowledged_by_event_frame: actions.filter(({ action }) => action.wsOutcome === 'event').length,
      answered_by_error_frame: actions.filter(({ action }) => action.wsOutcome === 'error').length,
      error_frame_after_event_frame: actions.filter(
        ({ action }) => action.wsOutcome === 'event' && action.errorFrames.length > 0,
      ).length,
      error_codes: actions
        .flatMap(({ action }) => action.errorFrames)
        .reduce<Record<string, number>>((byCode, code) => ({ ...byCode, [code]: (byCode[code] ?? 0) + 1 }), {}),
      silent: actions.filter(({ action }) => action.wsOutcome === 'silent').length,
      socket_closed_first: actions.filter(({ action }) => action.wsOutcome === 'closed').length,
      retried: actions.filter(({ action }) => action.wsOutcome !== 'event').length,
      retry_stored_it: actions.filter(({ action }) => action.restAck?.duplicate === false).length,
      retry_found_it_stored: actions.filter(({ action }) => action.restAck?.duplicate === true).length,
      failed_retry_answers: actions.reduce((n, { action }) => n + action.failedRetries.length, 0),
      sent_during_outage: notReady
        ? actions.filter(({ action }) => action.sentAt >= killedAt && action.sentAt <= notReady.to).length
        : 0,
      stored_user_messages: [...logs.values()].reduce((n, log) => n + userMessages(log).length, 0),
      stored_events: [...logs.values()].reduce((n, log) => n + log.length, 0),
      unanswered_user_messages: [...logs.values()].reduce((n, log) => n + unanswered(log).length, 0),
      ws_reconnects: chatters.reduce((n, c) => n + c.reconnects, 0),
      readyz_503_ms_after_kill: notReady ? { from: notReady.from - killedAt, to: notReady.to - killedAt } : null,
      sending_ms: sendingDone - sendingFrom,
      total_ms: Date.now() - startedAt,
    };
    console.log(`nats outage figures: ${JSON.stringify(figures)}`);

    // The fault happened, was seen, and was repaired: not ready for a while after the kill, a new nats-server, ready at the end.
    expect(notReady, 'readyz never answered 503 during the outage').toBeDefined();
    expect(notReady!.from).toBeGreaterThanOrEqual(killedAt);
    expect(embeddedNatsPid(server.dataDir)).not.toBe(natsBefore);
    expect((await http(server.baseUrl, 'GET', '/readyz')).status).toBe(200);
    // Clients were sending through it: after the kill, before readyz said ready again.
    expect(figures.sent_during_outage).toBeGreaterThan(0);

    for (const id of ids) {
      const log = logs.get(id)!;
      expect(idProblem(log), `${id}:\n${describeLog(log)}`).toBeNull();
      expect(duplicatedContents(log), `${id} stores a message twice`).toEqual([]);
    }

    const problems: string[] = [];
    for (const chatter of chatters) {
      const log = logs.get(chatter.conversationId)!;
      const counts = contentCounts(log);
      const stored = new Map(userMessages(log).map((e) => [e.event.data.content, e.seq]));
      const framed = framedSeqs(chatter);
      for (const action of chatter.actions) {
        const what = `${action.clientId} (ws ${action.wsOutcome}, errors [${action.errorFrames.join(', ')}], retry ${JSON.stringify(action.restAck ?? action.failedRetries)})`;
        const acks = [...(framed.get(action.content) ?? []), ...(action.restAck ? [action.restAck.seq] : [])];
        // Acknowledged (event frame or REST 202): stored exactly once, where the acknowledgement said.
        for (const seq of acks) {
          if (counts.get(action.content) !== 1)
            problems.push(`${what}: acknowledged at seq ${seq} but stored ${counts.get(action.content) ?? 0} times`);
          else if (stored.get(action.content) !== seq)
            problems.push(`${what}: acknowledged at seq ${seq} but stored at ${stored.get(action.content)}`);
        }
        // None vanished: acknowledged by its event frame, or refused with an error frame.
        if (action.wsOutcome !== 'event' && action.errorFrames.length === 0)
          problems.push(`${what}: neither an event frame nor an error frame`);
        // Retried until stored: every action ends acknowledged, and stored once.
        if (acks.length === 0) problems.push(`${what}: never acknowledged`);
        if ((counts.get(action.content) ?? 0) !== 1)
          problems.push(`${what}: stored ${counts.get(action.content) ?? 0} times`);
      }
    }
    expect(problems).toEqual([]);

    // Nothing else was stored.
    for (const id of ids) {
      const sent = new Set(
        chatters.filter((c) => c.conversationId === id).flatMap((c) => c.actions.map((a) => a.content)),
      );
      expect(userMessages(logs.get(id)!).filter((m) => !sent.has(m.event.data.content))).toEqual([]);
    }

    // Every socket got every stored event after its cursor, once and in order; the open ones, up to the end of the log.
    const delivery: string[] = [];
    for (const chatter of chatters) {
      expect(chatter.connections.flatMap((c) => c.ws.invalid)).toEqual([]);
      const log = logs.get(chatter.conversationId)!;
      for (const connection of chatter.connections) {
        const problem = deliveryProblem(connection, log, connection.ws.isOpen);
        if (problem) delivery.push(`${chatter.name}: ${problem}`);
      }
    }
    expect.soft(delivery, 'ws clients missed stored events').toEqual([]);

    // The scripted agent answers every user message, once.
    for (const id of ids) {
      const log = logs.get(id)!;
      const answers = userMessages(log).map(
        (m) => [m.event.data.content, answersTo(log, m.event.data.content).length] as const,
      );
      expect
        .soft(
          answers.filter(([, n]) => n !== 1),
          `${id}: messages not answered exactly once`,
        )
        .toEqual([]);
    }
  }, 150_000);
});
