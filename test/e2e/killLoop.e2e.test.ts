import { describe, expect, it } from 'vitest';
import { ConversationInfo, type LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import {
  crashLogProblems,
  describeLog,
  inPool,
  killHard,
  postMessage,
  sleep,
  type MessageAck,
  type SentMessage,
} from '../support/faults.ts';
import { allEvents, createConversation, http, type ServerProcess } from '../support/serverProcess.ts';
import { until } from '../support/until.ts';

/**
 * Four kills (ten, then six, until the suite neared its 10-minute bound): every round covers
 * the same cases (messages in flight, mid-task conversations, retries found stored), each
 * after more history than the last.
 */
const ROUNDS = 4;
const CONVERSATIONS = 50;
/** User messages per conversation and round: one wave over all conversations, then the next. */
const MESSAGES_PER_ROUND = 3;
/** The kill comes once every conversation got a message this round, at a point of the later waves that moves from round to round. */
const killAfterAcks = (round: number) => CONVERSATIONS + ((round * 17) % CONVERSATIONS);
/** Requests in flight at once. */
const CONCURRENCY = 16;
/** Retries of an action whose outcome the kill hid, after the restart. */
const RETRY_ATTEMPTS = 20;
const RETRY_WAIT_MS = 250;
/** How long every conversation's new message may take to be answered after a restart. */
const ANSWER_TIMEOUT_MS = 60_000;
const ENV = {
  // The agent thinks a little, so steps are under way when the server dies.
  TETHER_AGENT_DELAY_MS: '100',
  // All 50 conversations belong to user `local`: the per-user running cap (default 3) would send
  // the busy ones out of memory mid-task, which is another test's subject.
  TETHER_MAX_RUNNING_PER_USER: String(CONVERSATIONS),
};

interface RoundFigures {
  round: number;
  acked_before_kill: number;
  unanswered_at_kill: number;
  /** Event frames the watchers had received when the server died. */
  frames_before_kill: number;
  /** Conversations whose log did not end waiting for the user when the server died. */
  mid_task_at_kill: number;
  retried_found_stored: number;
  retried_stored_now: number;
  restart_ms: number;
  check_ms: number;
  stored_events: number;
}

const e2e = useE2e();
const start = (dataDir: string) => e2e.start({ dataDir, env: ENV });

/** POST a message action; null when no answer came (the server died under it). */
const post = (server: ServerProcess, sent: SentMessage) => postMessage(server.baseUrl, sent);

describe('kill -9 of the server, again and again, while 50 conversations are busy', () => {
  it('keeps every acknowledged message exactly once, keeps ids dense and brings every conversation back after each of four kills', async (ctx) => {
    const startedAt = Date.now();
    const dataDir = await e2e.tempDir();
    let server = await start(dataDir);
    ctx.onTestFailed(() => console.log(`last tether's stderr (tail):\n${server.stderr().slice(-6_000)}`));

    const ids = await inPool(Array.from({ length: CONVERSATIONS }), 10, () => createConversation(server.baseUrl));
    /** Every message acknowledged so far, by content. */
    const acked = new Map<string, MessageAck>();
    /** Every content sent to each conversation. */
    const sent = new Map<string, Set<string>>(ids.map((id) => [id, new Set()]));
    /** Sent, but the kill hid the outcome: retried with the same client_id after the restart. */
    let unknown: SentMessage[] = [];
    let previousLogs = new Map<string, LoggedEvent[]>();
    const figures: RoundFigures[] = [];

    for (let round = 1; round <= ROUNDS; round++) {
      // Activity on every conversation, and a kill -9 once enough of it is acknowledged.
      const wave: SentMessage[] = [];
      for (let m = 0; m < MESSAGES_PER_ROUND; m++) {
        for (const [c, id] of ids.entries()) {
          wave.push({
            conversationId: id,
            content: `round ${round} conversation ${c} message ${m}`,
            clientId: `r${round}-c${c}-m${m}`,
          });
        }
      }
      const killAfter = killAfterAcks(round);
      // A ws client watches every conversation from its current end: every event frame it gets was acknowledged by the log.
      const watchers = await inPool(ids, CONCURRENCY, async (id) => {
        const ws = await e2e.connect(server, id, { afterSeq: previousLogs.get(id)?.at(-1)?.seq ?? 0 });
        return { id, ws };
      });
      let acks = 0;
      let killed: Promise<unknown> | undefined;
      const victim = server;
      await inPool(wave, CONCURRENCY, async (message) => {
        if (killed) return; // Not sent: the server is gone.
        sent.get(message.conversationId)!.add(message.content);
        const res = await post(victim, message);
        if (res?.status === 202) {
          acked.set(message.content, {
            conversationId: message.conversationId,
            seq: res.body.seq,
            duplicate: res.body.duplicate,
            round,
          });
          acks += 1;
          if (acks >= killAfter) killed ??= killHard(victim);
        } else {
          unknown.push(message);
        }
      });
      expect(acks, `round ${round}: acknowledged before the kill`).toBeGreaterThanOrEqual(killAfter);
      expect(await killed).toMatchObject({ signal: 'SIGKILL' });
      await Promise.all(watchers.map(({ ws }) => ws.closed));
      const unansweredAtKill = unknown.length;

      // The same data dir again.
      const restartFrom = Date.now();
      server = await start(dataDir);
      const restartMs = Date.now() - restartFrom;
      const checkFrom = Date.now();

      // A client retries what it never heard back about, with the same client_id.
      const retried = await inPool(unknown, CONCURRENCY, async (message) => {
        for (let attempt = 0; attempt < RETRY_ATTEMPTS; attempt++) {
          const res = await post(server, message);
          if (res?.status === 202) return { message, ack: res.body };
          await sleep(RETRY_WAIT_MS);
        }
        return { message, ack: undefined };
      });
      expect(
        retried.filter((r) => !r.ack).map((r) => r.message.clientId),
        `round ${round}: retries never answered 202`,
      ).toEqual([]);
      for (const { message, ack } of retried) {
        acked.set(message.content, {
          conversationId: message.conversationId,
          seq: ack!.seq,
          duplicate: ack!.duplicate,
          round,
        });
      }
      unknown = [];

      // Every conversation comes back: its info has a state, and a new message is answered.
      const infos = await inPool(ids, CONCURRENCY, (id) => http(server.baseUrl, 'GET', `/api/conversations/${id}`));
      const badInfos = infos
        .map((res, i) => ({ id: ids[i]!, res }))
        .filter(
          ({ id, res }) =>
            res.status !== 200 ||
            !ConversationInfo.safeParse(res.body).success ||
            (res.body as ConversationInfo).conversation_id !== id,
        )
        .map(({ id, res }) => `${id}: ${res.status} ${res.text.slice(0, 200)}`);
      expect(badInfos, `round ${round}: conversations that did not come back`).toEqual([]);

      const probes = await inPool(ids, CONCURRENCY, async (id, c) => {
        const probe: SentMessage = {
          conversationId: id,
          content: `after kill ${round}, conversation ${c}`,
          clientId: `probe-${round}-${c}`,
        };
        sent.get(id)!.add(probe.content);
        const res = await post(server, probe);
        expect(res?.status, `round ${round}: ${id} refused a new message: ${res?.text}`).toBe(202);
        acked.set(probe.content, { conversationId: id, seq: res!.body.seq, duplicate: res!.body.duplicate, round });
        return { id, seq: res!.body.seq };
      });
      const logs = await untilAnswered(server, probes, round);

      const problems: string[] = [];
      for (const id of ids) {
        const log = logs.get(id)!;
        const where = `round ${round}, ${id}`;
        const before = previousLogs.get(id) ?? [];
        problems.push(...crashLogProblems(where, log, { conversationId: id, acked, sent: sent.get(id)!, before }));
        // Every event frame a watcher got before the kill is in the log, the same event at the same seq.
        for (const { ws } of watchers.filter((w) => w.id === id)) {
          const bySeq = new Map(log.map((e) => [e.seq, e.event]));
          for (const f of ws.events()) {
            if (JSON.stringify(bySeq.get(f.seq)) !== JSON.stringify(f.event))
              problems.push(`${where}: event frame at seq ${f.seq} (${f.event.type}) is not in the log as sent`);
          }
          if (ws.invalid.length > 0)
            problems.push(`${where}: invalid frames ${JSON.stringify(ws.invalid).slice(0, 300)}`);
        }
      }
      expect(problems).toEqual([]);
      const midTask = ids.filter((id) => {
        const log = logs.get(id)!;
        const back = log.findIndex(
          (e, i) => i >= (previousLogs.get(id)?.length ?? 0) && e.event.type === 'session_rehydrated',
        );
        const beforeKill = back > 0 ? log[back - 1]!.event : undefined;
        return !(beforeKill?.type === 'agent_state_changed' && beforeKill.data.state === 'awaiting_user_input');
      }).length;
      previousLogs = logs;

      const retriedFoundStored = retried.filter((r) => r.ack!.duplicate).length;
      figures.push({
        round,
        acked_before_kill: acks,
        unanswered_at_kill: unansweredAtKill,
        frames_before_kill: watchers.reduce((n, { ws }) => n + ws.events().length, 0),
        mid_task_at_kill: midTask,
        retried_found_stored: retriedFoundStored,
        retried_stored_now: retried.length - retriedFoundStored,
        restart_ms: restartMs,
        check_ms: Date.now() - checkFrom,
        stored_events: [...logs.values()].reduce((n, log) => n + log.length, 0),
      });
    }

    console.log(
      `kill loop figures: ${JSON.stringify({ rounds: figures, acknowledged: acked.size, total_ms: Date.now() - startedAt })}`,
    );
  }, 300_000);
});

/**
 * Waits until each conversation's new message is answered: an agent message
 * whose cause is that message. Returns the logs then.
 */
async function untilAnswered(
  server: ServerProcess,
  probes: ReadonlyArray<{ id: string; seq: number }>,
  round: number,
): Promise<Map<string, LoggedEvent[]>> {
  const logs = new Map<string, LoggedEvent[]>();
  let waiting = [...probes];
  const late = () =>
    waiting
      .map((p) => `${p.id} (message at seq ${p.seq}):\n${describeLog((logs.get(p.id) ?? []).slice(-15))}`)
      .join('\n');
  await until(
    async () => {
      const read = await inPool(waiting, CONCURRENCY, (p) => allEvents(server.baseUrl, p.id));
      waiting.forEach((p, i) => logs.set(p.id, read[i]!));
      waiting = waiting.filter((p) => {
        const log = logs.get(p.id)!;
        const probe = log.find((e) => e.seq === p.seq);
        return !(
          probe &&
          log.some((e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.cause === probe.event.id)
        );
      });
      return waiting.length === 0;
    },
    () => `round ${round}: the new messages to be answered; not answered:\n${late()}`,
    { timeoutMs: ANSWER_TIMEOUT_MS, everyMs: 200 },
  );
  return logs;
}
