import { beforeAll, describe, expect, it } from 'vitest';
import { ConversationInfo, type LoggedEvent } from '../../protocol/index.ts';
import { connectNats, kvClusterStore, type KvClusterStore } from '../../src/store/index.ts';
import {
  crashLogProblems,
  deliveryProblem,
  describeLog,
  inPool,
  killHard,
  postMessage,
  sleep,
  type Connection,
  type MessageAck,
  type SentMessage,
} from '../support/faults.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import type { NatsCluster } from '../support/natsCluster.ts';
import { allEvents, createConversation, http, type ServerExit, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

// The kill loop of killLoop.e2e.test.ts on a cluster: three `tether serve` on a
// 3-node NATS cluster, one of them killed -9 in each of six rounds while 50
// conversations are busy, and started again with the same node id.
const NODES = ['n1', 'n2', 'n3'] as const;
type NodeName = (typeof NODES)[number];
const LEASE_MS = 1_000;
const ROUNDS = 4;
const CONVERSATIONS = 50;
/** User messages per conversation and round: one wave over all conversations, then the next. */
const MESSAGES_PER_ROUND = 3;
/** The kill comes once every conversation got a message this round, at a point of the later waves that moves from round to round. */
const killAfterAcks = (round: number) => CONVERSATIONS + ((round * 17) % CONVERSATIONS);
/**
 * The node killed in each round: both ways of coming back (restarted at once, and after its
 * heartbeat aged out: see restartsAtOnce), and a node killed again in the round after its
 * restart. Four rounds (six until the suite neared its 10-minute bound).
 */
const VICTIMS: readonly NodeName[] = ['n1', 'n3', 'n2', 'n2'];
/**
 * In even rounds the killed node starts again at once, racing its heartbeat's
 * expiry (it takes back what it still owns); in odd rounds once the wave is done
 * and its heartbeat is gone, so the others have had their chance to take over.
 */
const restartsAtOnce = (round: number) => round % 2 === 0;
/** Requests in flight at once. */
const CONCURRENCY = 16;
/** Retries of an action whose outcome the kill hid, after the restart. */
const RETRY_ATTEMPTS = 20;
const RETRY_WAIT_MS = 250;
/** How long every conversation's new message may take to be answered and its log to settle. */
const ANSWER_TIMEOUT_MS = 60_000;
const ENV = {
  TETHER_LEASE_MS: String(LEASE_MS),
  // The agent thinks a little, so steps are under way when a node dies.
  TETHER_AGENT_DELAY_MS: '100',
  // All 50 conversations belong to user `local`: the per-user running cap (default 3) would send
  // the busy ones out of memory mid-task, which is another test's subject.
  TETHER_MAX_RUNNING_PER_USER: String(CONVERSATIONS),
  // Takeovers, recoveries and lapses, for the stderr printed when the test fails.
  TETHER_LOG_LEVEL: 'info',
};

interface RoundFigures {
  round: number;
  killed: NodeName;
  restart: 'at once' | 'once its heartbeat aged out';
  acked_before_kill: number;
  /** Acknowledged after the kill: in flight through the survivors, or sent through them afterwards. */
  acked_after_kill: number;
  /** Conversations whose owner record named the killed node when it died. */
  owned_at_kill: number;
  /** Of those, how many the killed node owned again after the round. */
  owned_again: number;
  /** Sends whose outcome the kill hid, by what came back, the node they went through, and before or after the kill. */
  unknown: Record<string, number>;
  retried_found_stored: number;
  retried_stored_now: number;
  restart_ms: number;
  /** From the kill until every conversation had answered its probe and settled. */
  kill_to_all_answered_ms: number;
  /** From the first probe sent until all were answered. */
  probes_answered_ms: number;
  /** session_rehydrated events stored this round: takeovers, take-backs and recoveries. */
  rehydrated: number;
  /** Owners on record after the round. */
  owners_after: Record<string, number>;
  /** Event frames the watchers got this round; those on the killed node closed with it. */
  frames: number;
  stored_events: number;
}

const e2e = useE2e();
let nats: NatsCluster;
let workspaces: string;
let cluster: KvClusterStore;
const dataDirs = new Map<NodeName, string>();
const nodes = new Map<NodeName, ServerProcess>();
/** Every process each node ran, the killed ones too, for their stderr when the test fails. */
const history: Array<{ name: NodeName; server: ServerProcess }> = [];

async function startNode(name: NodeName): Promise<ServerProcess> {
  const server = await e2e.start({
    dataDir: dataDirs.get(name)!,
    env: { ...ENV, NATS_URL: nats.url, TETHER_NODE_ID: name, TETHER_WORKSPACES_DIR: workspaces },
  });
  nodes.set(name, server);
  history.push({ name, server });
  return server;
}

const node = (name: NodeName) => nodes.get(name)!;

beforeAll(async () => {
  nats = await e2e.natsCluster();
  workspaces = await e2e.tempDir();
  for (const name of NODES) dataDirs.set(name, await e2e.tempDir());
  await Promise.all(NODES.map((name) => startNode(name)));
  // The owner records, read the way the nodes read them (from the stream leader).
  const nc = await connectNats(nats.url, { name: 'cluster-kill-loop-test' });
  e2e.onCleanup(() => nc.close());
  cluster = await kvClusterStore(nc, { leaseMs: LEASE_MS });
}, 90_000);

/**
 * A fixed pseudo-random number from the round and an index: the same on every
 * run, so that which node a request goes through is reproduced by a rerun.
 */
function mix(...parts: number[]): number {
  let h = 0x2545f491;
  for (const part of parts) {
    h = Math.imul(h ^ part, 0x9e3779b1);
    h ^= h >>> 15;
  }
  h = Math.imul(h ^ (h >>> 13), 0x85ebca6b);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The node the hash picks, or the next one up when it is down, never one of `not`. */
function pickNode(up: ReadonlySet<NodeName>, hash: number, not: readonly NodeName[] = []): NodeName {
  for (let k = 0; k < NODES.length; k++) {
    const name = NODES[(hash + k) % NODES.length]!;
    if (up.has(name) && !not.includes(name)) return name;
  }
  throw new Error(`no node up besides ${not.join(', ')}`);
}

/** Owner on record of each conversation ('' when none). */
async function owners(ids: readonly string[]): Promise<Map<string, string>> {
  const reads = await inPool(ids, CONCURRENCY, (id) => cluster.owner(id));
  return new Map(ids.map((id, i) => [id, reads[i]?.record.node_id ?? '']));
}

/** One ws client per conversation from its current end, spread over the nodes (which one moves each round). */
async function openWatchers(ids: readonly string[], round: number, cursors: ReadonlyMap<string, LoggedEvent[]>) {
  return inPool(ids, CONCURRENCY, async (id, c) => {
    const name = NODES[(c + round) % NODES.length]!;
    const afterSeq = cursors.get(id)?.at(-1)?.seq ?? 0;
    const ws = await e2e.connect(node(name), id, { afterSeq });
    return { id, name, connection: { ws, afterSeq } satisfies Connection };
  });
}

describe('kill -9 of one node of three, six times, while 50 conversations are busy', () => {
  it('keeps every acknowledged message exactly once, keeps ids dense, and every conversation answers through any node after each of four kills', async (ctx) => {
    const startedAt = Date.now();
    ctx.onTestFailed(() => {
      for (const { name, server } of history.slice(-6))
        console.log(`stderr of ${name} (pid ${server.pid}, tail):\n${server.stderr().slice(-5_000)}`);
    });
    const up = new Set<NodeName>(NODES);
    const ids = await inPool(Array.from({ length: CONVERSATIONS }), 10, (_, c) =>
      createConversation(node(NODES[c % NODES.length]!).baseUrl),
    );
    /** Every message acknowledged so far, by content. */
    const acked = new Map<string, MessageAck>();
    /** Every content sent to each conversation. */
    const sent = new Map<string, Set<string>>(ids.map((id) => [id, new Set()]));
    let previousLogs = new Map<string, LoggedEvent[]>();
    const figures: RoundFigures[] = [];

    for (let round = 1; round <= ROUNDS; round++) {
      const victim = VICTIMS[round - 1]!;
      const atOnce = restartsAtOnce(round);
      const watchers = await openWatchers(ids, round, previousLogs);
      const wave = await waveWithKill({ round, ids, up, sent, acked, victim, atOnce });
      expect(await wave.killed).toMatchObject({ signal: 'SIGKILL' });
      await Promise.all(watchers.filter((w) => w.name === victim).map((w) => w.connection.ws.closed));
      if (!atOnce) {
        await until(
          async () => ((await cluster.alive(victim)) ? undefined : true),
          `the heartbeat of ${victim} to age out`,
          { ...SERVER_WAIT, timeoutMs: 10_000 },
        );
      }
      const restartMs = await (wave.restarted ?? restart(victim, up));

      const retried = await retry(wave.unknown, up, round);
      for (const { message, ack } of retried)
        acked.set(message.content, { conversationId: message.conversationId, ...ack, round });

      // Every conversation comes back: a node answers for its info, and a new message through any node is answered.
      expect(await badInfos(ids, up, round), `round ${round}: conversations that did not come back`).toEqual([]);
      const probesFrom = Date.now();
      const probes = await inPool(ids, CONCURRENCY, async (id, c) => {
        const probe: SentMessage = {
          conversationId: id,
          content: `after kill ${round}, conversation ${c}`,
          clientId: `probe-${round}-${c}`,
        };
        sent.get(id)!.add(probe.content);
        const via = pickNode(up, mix(round, 1_000 + c));
        const res = await postMessage(node(via).baseUrl, probe);
        expect(res?.status, `round ${round}: ${id} refused a new message through ${via}: ${res?.text}`).toBe(202);
        acked.set(probe.content, { conversationId: id, ...res!.body, round });
        return { id, seq: res!.body.seq };
      });
      const logs = await untilAnswered(probes, up, round);
      const answeredAt = Date.now();

      const problems: string[] = [];
      for (const id of ids) {
        const expected = { conversationId: id, acked, sent: sent.get(id)!, before: previousLogs.get(id) ?? [] };
        problems.push(...crashLogProblems(`round ${round}, ${id}`, logs.get(id)!, expected));
      }
      problems.push(...(await watcherProblems(watchers, logs, victim, round)));
      const ownersAfter = await owners(ids);
      problems.push(...(await holderProblems(ids, ownersAfter, round)));
      expect(problems).toEqual([]);
      await Promise.all(watchers.map((w) => w.connection.ws.terminate()));

      const retriedFoundStored = retried.filter((r) => r.ack.duplicate).length;
      figures.push({
        round,
        killed: victim,
        restart: atOnce ? 'at once' : 'once its heartbeat aged out',
        acked_before_kill: wave.ackedBeforeKill,
        acked_after_kill: wave.acks - wave.ackedBeforeKill,
        owned_at_kill: wave.ownedAtKill.length,
        owned_again: wave.ownedAtKill.filter((id) => ownersAfter.get(id) === victim).length,
        unknown: countBy(wave.unknown.map((u) => u.outcome)),
        retried_found_stored: retriedFoundStored,
        retried_stored_now: retried.length - retriedFoundStored,
        restart_ms: restartMs,
        kill_to_all_answered_ms: answeredAt - wave.killedAt,
        probes_answered_ms: answeredAt - probesFrom,
        rehydrated: ids.reduce((n, id) => n + rehydrations(logs.get(id)!.slice(previousLogs.get(id)?.length ?? 0)), 0),
        owners_after: countBy([...ownersAfter.values()]),
        frames: watchers.reduce((n, w) => n + w.connection.ws.events().length, 0),
        stored_events: [...logs.values()].reduce((n, log) => n + log.length, 0),
      });
      previousLogs = logs;
    }

    console.log(
      `cluster kill loop figures: ${JSON.stringify({ rounds: figures, acknowledged: acked.size, total_ms: Date.now() - startedAt })}`,
    );
  }, 240_000);
});

/** Starts the killed node again: same data dir and node id, a new port. Resolves with how long it took. */
async function restart(name: NodeName, up: Set<NodeName>): Promise<number> {
  const from = Date.now();
  await startNode(name);
  up.add(name);
  return Date.now() - from;
}

interface WaveSetup {
  round: number;
  ids: readonly string[];
  up: Set<NodeName>;
  sent: ReadonlyMap<string, Set<string>>;
  acked: Map<string, MessageAck>;
  victim: NodeName;
  atOnce: boolean;
}

/** A send whose outcome the kill hid: what came back, through which node. */
interface Unknown {
  message: SentMessage;
  via: NodeName;
  outcome: string;
}

/**
 * Sends the round's messages through nodes picked by (round, index) among those
 * up, and kills the victim -9 once `killAfterAcks(round)` are acknowledged; the
 * rest go through the survivors (and, in an at-once round, the restarted node).
 */
async function waveWithKill(setup: WaveSetup) {
  const { round, ids, up, sent, acked, victim, atOnce } = setup;
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
  const outcome = {
    acks: 0,
    ackedBeforeKill: 0,
    killedAt: 0,
    /** Conversations whose owner record named the victim when it died. */
    ownedAtKill: [] as string[],
    unknown: [] as Unknown[],
    killed: undefined as Promise<ServerExit> | undefined,
    restarted: undefined as Promise<number> | undefined,
  };
  const kill = async (): Promise<ServerExit> => {
    up.delete(victim);
    const exit = await killHard(node(victim));
    outcome.killedAt = Date.now();
    if (atOnce) outcome.restarted = restart(victim, up);
    // Nobody claims its conversations before its heartbeat ages out (most of a lease), and the
    // restarted node takes back only what names it: read at once, while it starts.
    const recorded = await owners(ids);
    outcome.ownedAtKill = ids.filter((id) => recorded.get(id) === victim);
    return exit;
  };
  await inPool(wave, CONCURRENCY, async (message, i) => {
    const via = pickNode(up, mix(round, i));
    sent.get(message.conversationId)!.add(message.content);
    const res = await postMessage(node(via).baseUrl, message);
    if (res?.status !== 202) {
      const answer = res ? `${res.status} ${(res.body as { error?: { code?: string } })?.error?.code}` : 'no answer';
      const when = outcome.killed ? 'after' : 'before';
      outcome.unknown.push({ message, via, outcome: `${answer} via ${via} ${when} the kill` });
      return;
    }
    acked.set(message.content, { conversationId: message.conversationId, ...res.body, round });
    outcome.acks += 1;
    if (outcome.acks >= killAfter && !outcome.killed) {
      outcome.ackedBeforeKill = outcome.acks;
      outcome.killed = kill();
    }
  });
  expect(outcome.ackedBeforeKill, `round ${round}: acknowledged before the kill`).toBe(killAfter);
  return outcome;
}

const rehydrations = (events: readonly LoggedEvent[]) =>
  events.filter((e) => e.event.type === 'session_rehydrated').length;

function countBy(keys: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const key of keys) counts[key] = (counts[key] ?? 0) + 1;
  return counts;
}

/** A client retries what it never heard back about, with the same client_id, through another node than the first. */
async function retry(unknown: readonly Unknown[], up: ReadonlySet<NodeName>, round: number) {
  const retried = await inPool(unknown, CONCURRENCY, async ({ message, via }, i) => {
    for (let attempt = 0; attempt < RETRY_ATTEMPTS; attempt++) {
      const other = pickNode(up, mix(round, 2_000 + i, attempt), [via]);
      const res = await postMessage(node(other).baseUrl, message);
      if (res?.status === 202) return { message, ack: res.body };
      await sleep(RETRY_WAIT_MS);
    }
    return { message, ack: undefined };
  });
  expect(
    retried.filter((r) => !r.ack).map((r) => r.message.clientId),
    `round ${round}: retries never answered 202`,
  ).toEqual([]);
  return retried.map(({ message, ack }) => ({ message, ack: ack! }));
}

/** Conversations whose info a node picked by (round, index) does not answer well. */
async function badInfos(ids: readonly string[], up: ReadonlySet<NodeName>, round: number): Promise<string[]> {
  const infos = await inPool(ids, CONCURRENCY, async (id, c) => {
    const via = pickNode(up, mix(round, 3_000 + c));
    return { id, via, res: await http(node(via).baseUrl, 'GET', `/api/conversations/${id}`) };
  });
  return infos
    .filter(
      ({ id, res }) =>
        res.status !== 200 ||
        !ConversationInfo.safeParse(res.body).success ||
        (res.body as ConversationInfo).conversation_id !== id,
    )
    .map(({ id, via, res }) => `${id} through ${via}: ${res.status} ${res.text.slice(0, 200)}`);
}

/**
 * Waits until each conversation's new message is answered (an agent message
 * whose cause is that message) and its log has settled, reading through nodes
 * picked in turn. Returns the logs then: nothing more comes by itself.
 */
async function untilAnswered(
  probes: ReadonlyArray<{ id: string; seq: number }>,
  up: ReadonlySet<NodeName>,
  round: number,
): Promise<Map<string, LoggedEvent[]>> {
  const logs = new Map<string, LoggedEvent[]>();
  let waiting = [...probes];
  let pass = 0;
  const late = () =>
    waiting
      .map((p) => `${p.id} (message at seq ${p.seq}):\n${describeLog((logs.get(p.id) ?? []).slice(-15))}`)
      .join('\n');
  await until(
    async () => {
      const read = await inPool(waiting, CONCURRENCY, (p, i) =>
        allEvents(node(pickNode(up, mix(round, 4_000 + i, pass))).baseUrl, p.id),
      );
      pass += 1;
      waiting.forEach((p, i) => logs.set(p.id, read[i]!));
      waiting = waiting.filter((p) => {
        const log = logs.get(p.id)!;
        const probe = log.find((e) => e.seq === p.seq);
        const answered = log.some(
          (e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.cause === probe?.event.id,
        );
        return !(probe && answered && endsAwaiting(log));
      });
      return waiting.length === 0;
    },
    () => `round ${round}: the new messages to be answered; not answered:\n${late()}`,
    { timeoutMs: ANSWER_TIMEOUT_MS, everyMs: 200 },
  );
  return logs;
}

/**
 * Watchers on the survivors got every event of the round once and in order,
 * across the takeover; those on the killed node got a gapless run of the log
 * from their cursor until it died.
 */
async function watcherProblems(
  watchers: ReadonlyArray<{ id: string; name: NodeName; connection: Connection }>,
  logs: ReadonlyMap<string, LoggedEvent[]>,
  victim: NodeName,
  round: number,
): Promise<string[]> {
  const problems: string[] = [];
  for (const { id, name, connection } of watchers) {
    const log = logs.get(id)!;
    const survived = name !== victim;
    const { ws } = connection;
    if (survived) {
      const end = log.at(-1)?.seq ?? 0;
      await ws.waitUntil(() => ws.lastSeq() >= end, { timeoutMs: 10_000, what: `seq ${end}` }).catch(() => undefined);
    }
    const problem = deliveryProblem(connection, log, survived);
    const where = `round ${round}, ${id}, watcher on ${name}${survived ? '' : ' (killed)'}`;
    if (problem) problems.push(`${where}: ${problem}`);
    if (ws.invalid.length > 0) problems.push(`${where}: invalid frames ${JSON.stringify(ws.invalid).slice(0, 300)}`);
  }
  return problems;
}

/**
 * At most one node holds each conversation in memory, and only the owner on record. Each owner says
 * which of its conversations it holds, and each node how many sessions it holds in all: when each
 * count is just the owned ones it holds, it holds no other. Otherwise (a session on its way out
 * counts too) every node is asked about every conversation, and that decides.
 */
async function holderProblems(
  ids: readonly string[],
  recorded: ReadonlyMap<string, string>,
  round: number,
): Promise<string[]> {
  const [counts, heldByOwner] = await Promise.all([
    Promise.all(NODES.map((name) => liveSessions(name))),
    inPool(ids, CONCURRENCY, async (id) => {
      const owner = NODES.find((name) => name === recorded.get(id));
      if (!owner) return undefined;
      const info = await http<ConversationInfo>(node(owner).baseUrl, 'GET', `/api/conversations/${id}`);
      return info.body.in_memory ? owner : undefined;
    }),
  ]);
  if (NODES.every((name, i) => counts[i] === heldByOwner.filter((holder) => holder === name).length)) return [];
  const held = await inPool(ids, CONCURRENCY, async (id) => {
    const infos = await Promise.all(
      NODES.map((name) => http<ConversationInfo>(node(name).baseUrl, 'GET', `/api/conversations/${id}`)),
    );
    return { id, holders: NODES.filter((_, i) => infos[i]!.body.in_memory) };
  });
  return held
    .filter(({ id, holders }) => holders.length > 1 || holders.some((name) => name !== recorded.get(id)))
    .map(
      ({ id, holders }) =>
        `round ${round}, ${id}: in memory on ${holders.join(', ')}, owner on record ${recorded.get(id) || 'none'}`,
    );
}

/** Sessions in the node's memory, by its own metrics. */
async function liveSessions(name: NodeName): Promise<number> {
  const text = (await http(node(name).baseUrl, 'GET', '/metrics')).text;
  return Number(/^tether_live_sessions (\d+)$/m.exec(text)?.[1] ?? NaN);
}
