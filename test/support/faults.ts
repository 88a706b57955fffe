import { readFileSync, readdirSync } from 'node:fs';
import type { AgentState, LoggedEvent } from '../../protocol/index.ts';
import { allEvents, http, type HttpResult, type ServerExit, type ServerProcess } from './serverProcess.ts';
import { repliesTo } from './logQueries.ts';
import { until } from './until.ts';
import type { Frame, WsClient } from './wsClient.ts';

/**
 * Helpers for fault tests: killing the processes, probing readiness, and
 * reading a conversation's log the way the assertions need it.
 */

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The embedded nats-server of a Tether: the live (not zombie) nats-server process whose arguments name its data dir. */
export function embeddedNatsPid(dataDir: string): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (cmdline[0]?.endsWith('nats-server') && cmdline.some((a) => a.startsWith(dataDir)) && state !== 'Z')
        return Number(entry);
    } catch {
      // Gone meanwhile.
    }
  }
  return undefined;
}

/**
 * SIGSTOP of process `pid`, resolved once every one of its threads is stopped
 * (state `T` in /proc): until then a thread already running may still answer.
 */
export async function stopProcess(pid: number): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  const stopped = () =>
    readdirSync(`/proc/${pid}/task`).every((task) => {
      const stat = readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'T';
    });
  for (let i = 0; !stopped(); i++) {
    if (i >= 200) throw new Error(`process ${pid} did not stop within 2 s of SIGSTOP`);
    await sleep(10);
  }
}

/** kill -9 of the Tether process; resolves once it is gone. */
export async function killHard(server: ServerProcess): Promise<ServerExit> {
  server.kill('SIGKILL');
  return server.exited;
}

export interface ReadyzSample {
  at: number;
  /** HTTP status, or 0 when the request itself failed. */
  status: number;
}

/** Polls `GET /readyz` at a steady pace until stopped, keeping every answer with its time. */
export class ReadyzProbe {
  readonly samples: ReadyzSample[] = [];
  #running = true;
  readonly #done: Promise<void>;

  constructor(baseUrl: string, everyMs = 50) {
    this.#done = (async () => {
      while (this.#running) {
        let status: number;
        try {
          const res = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(2_000) });
          await res.body?.cancel();
          status = res.status;
        } catch {
          status = 0;
        }
        this.samples.push({ at: Date.now(), status });
        await sleep(everyMs);
      }
    })();
  }

  /** First and last time a 503 was seen, or undefined when none was. */
  notReadyWindow(): { from: number; to: number } | undefined {
    const down = this.samples.filter((s) => s.status === 503);
    return down.length === 0 ? undefined : { from: down[0]!.at, to: down.at(-1)!.at };
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#done;
  }
}

export type UserMessage = LoggedEvent & { event: Extract<LoggedEvent['event'], { type: 'message' }> };

export function userMessages(events: readonly LoggedEvent[]): UserMessage[] {
  return events.filter((e): e is UserMessage => e.event.source === 'user' && e.event.type === 'message');
}

/** How many times each user message content is stored. */
export function contentCounts(events: readonly LoggedEvent[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const e of userMessages(events)) counts.set(e.event.data.content, (counts.get(e.event.data.content) ?? 0) + 1);
  return counts;
}

/** User message contents stored more than once. */
export function duplicatedContents(events: readonly LoggedEvent[]): string[] {
  return [...contentCounts(events)].filter(([, n]) => n > 1).map(([content]) => content);
}

/** What is wrong with the ids (dense from 0) and seqs (increasing) of a log, or null. */
export function idProblem(events: readonly LoggedEvent[]): string | null {
  for (const [i, e] of events.entries()) {
    if (e.event.id !== i) return `event #${i} (seq ${e.seq}) has id ${e.event.id}`;
    if (i > 0 && e.seq <= events[i - 1]!.seq) return `seq ${e.seq} of #${i} is not above ${events[i - 1]!.seq}`;
  }
  return null;
}

/** The scripted agent's answers to a user message. */
export const answersTo = repliesTo;

const IDLE: ReadonlySet<AgentState> = new Set(['awaiting_user_input', 'finished', 'stopped', 'error', 'paused']);

/** The log ends settled: its last event is a state fact saying the agent waits for the user. */
export function settled(events: readonly LoggedEvent[]): boolean {
  const last = events.at(-1)?.event;
  return last?.type === 'agent_state_changed' && IDLE.has(last.data.state);
}

/** User messages that no agent message quotes. */
export function unanswered(events: readonly LoggedEvent[]): UserMessage[] {
  return userMessages(events).filter((m) => answersTo(events, m.event.data.content).length === 0);
}

/**
 * Waits, bounded, until every conversation's log is settled and none has moved
 * for `stableMs`. Asks for each conversation first (GET /api/conversations/:id),
 * which brings back a session that a fault closed. Returns the logs.
 */
export async function untilQuiet(
  baseUrl: string,
  ids: readonly string[],
  options: { timeoutMs?: number; stableMs?: number } = {},
): Promise<Map<string, LoggedEvent[]>> {
  const { timeoutMs = 60_000, stableMs = 500 } = options;
  let previous = new Map<string, number>();
  let logs = new Map<string, LoggedEvent[]>();
  let unsettled: string[] = [...ids];
  const left = () =>
    unsettled
      .map((id) => `${id}: ends with ${JSON.stringify(logs.get(id)?.at(-1)?.event ?? null).slice(0, 200)}`)
      .join('; ') || 'their logs kept moving';
  return until(
    async () => {
      await Promise.all(unsettled.map((id) => http(baseUrl, 'GET', `/api/conversations/${id}`).catch(() => undefined)));
      // A read that fails is tried again after the pause, with the last error named on timeout.
      logs = new Map(await Promise.all(ids.map(async (id) => [id, await allEvents(baseUrl, id)] as const)));
      unsettled = ids.filter((id) => !settled(logs.get(id)!));
      const lastSeqs = new Map(ids.map((id) => [id, logs.get(id)!.at(-1)?.seq ?? 0]));
      const moved = ids.some((id) => previous.get(id) !== lastSeqs.get(id));
      previous = lastSeqs;
      return unsettled.length === 0 && !moved && logs;
    },
    () => `the conversations to settle (${left()})`,
    { timeoutMs, everyMs: stableMs, retryErrors: true },
  );
}

/** A user message a client sends with a client_id, so that sending it again stores it once. */
export interface SentMessage {
  conversationId: string;
  content: string;
  clientId: string;
}

/** A REST 202 for a message: where it is stored, and whether an earlier attempt had stored it. */
export interface MessageAck {
  conversationId: string;
  seq: number;
  duplicate: boolean;
  round: number;
}

/** POST a message action with its client_id; null when no answer came (the server died under it). */
export function postMessage(
  baseUrl: string,
  sent: SentMessage,
): Promise<HttpResult<{ seq: number; duplicate: boolean }> | null> {
  return http<{ seq: number; duplicate: boolean }>(
    baseUrl,
    'POST',
    `/api/conversations/${sent.conversationId}/actions`,
    {
      action: { type: 'message', content: sent.content },
      client_id: sent.clientId,
    },
  ).catch(() => null);
}

/** What a conversation's log must show after kills, compared with what its clients sent and were told. */
export interface LogExpectations {
  conversationId: string;
  /** Every message acknowledged so far (of any conversation), by content. */
  acked: ReadonlyMap<string, MessageAck>;
  /** Every content sent to this conversation, acknowledged or not. */
  sent: ReadonlySet<string>;
  /** The log as read after the previous kill: it may only have grown since. */
  before: readonly LoggedEvent[];
}

/**
 * What is wrong with a conversation's log after a crash, one line each, prefixed
 * with `where`: ids not dense, a message stored twice, an acknowledged message not
 * stored exactly once at its acknowledged seq, a message stored that was never sent,
 * two agent messages answering one event, or a change below the previous end.
 */
export function crashLogProblems(where: string, log: readonly LoggedEvent[], expected: LogExpectations): string[] {
  const problems: string[] = [];
  const badIds = idProblem(log);
  if (badIds) problems.push(`${where}: ids not dense: ${badIds}`);
  for (const content of duplicatedContents(log)) problems.push(`${where}: "${content}" stored twice`);
  const counts = contentCounts(log);
  const storedAt = new Map(userMessages(log).map((e) => [e.event.data.content, e.seq]));
  for (const [content, ack] of expected.acked) {
    if (ack.conversationId !== expected.conversationId) continue;
    if (counts.get(content) !== 1)
      problems.push(
        `${where}: "${content}" acknowledged (round ${ack.round}, seq ${ack.seq}) but stored ${counts.get(content) ?? 0} times`,
      );
    else if (storedAt.get(content) !== ack.seq)
      problems.push(`${where}: "${content}" acknowledged at seq ${ack.seq} but stored at ${storedAt.get(content)}`);
  }
  for (const m of userMessages(log))
    if (!expected.sent.has(m.event.data.content)) problems.push(`${where}: "${m.event.data.content}" was never sent`);
  // Recovery retries a pending step; it must not answer a message twice.
  const answered = new Map<number, number>();
  for (const e of log)
    if (e.event.source === 'agent' && e.event.type === 'message' && e.event.cause !== undefined)
      answered.set(e.event.cause, (answered.get(e.event.cause) ?? 0) + 1);
  for (const [cause, n] of answered) if (n > 1) problems.push(`${where}: ${n} agent messages answer event #${cause}`);
  // The log only grows: what was there after the last restart is still there, unchanged.
  if (JSON.stringify(log.slice(0, expected.before.length)) !== JSON.stringify(expected.before))
    problems.push(`${where}: the log changed below its previous end:\n${describeLog(log)}`);
  return problems;
}

/** One line per event, for assertion messages. */
export function describeLog(events: readonly LoggedEvent[], max = 60): string {
  const lines = events.map(
    ({ seq, event }) =>
      `${seq} #${event.id} ${event.ts} ${event.source} ${event.type} ${JSON.stringify(event.data).slice(0, 80)}${event.cause === undefined ? '' : ` cause=${event.cause}`}`,
  );
  return lines.length > max
    ? [...lines.slice(0, 10), `… ${lines.length - max} more …`, ...lines.slice(-(max - 10))].join('\n')
    : lines.join('\n');
}

/** Runs `work` on every item, at most `concurrency` at a time; resolves with the results in item order. */
export async function inPool<T, R>(
  items: readonly T[],
  concurrency: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index]!, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return results;
}

/** The event frame of the user message with this content. */
export const isUserMessageFrame = (frame: Frame, content: string) =>
  frame.type === 'event' &&
  frame.event.source === 'user' &&
  frame.event.type === 'message' &&
  frame.event.data.content === content;

/** A ws connection and the cursor it was opened with. */
export interface Connection {
  ws: WsClient;
  afterSeq: number;
}

/**
 * What a connection missed or got wrong compared with the log: it must have every
 * event after its cursor, once, in order (up to the end of the log with `wholeLog`,
 * else up to the last event it got).
 */
export function deliveryProblem(connection: Connection, log: readonly LoggedEvent[], wholeLog: boolean): string | null {
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
