// The failover scenario: three `tether serve` nodes on a 3-node NATS cluster,
// conversations created through node a (so a owns them), a message through b
// or c with every node up (the baseline), then kill -9 of a and each
// conversation's next message sent through b or c until it is accepted and
// answered. The row and its prose: failoverRows.ts.
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pLimit from 'p-limit';
import { kvClusterStore, type ClusterStore } from '../src/store/index.ts';
import {
  answers,
  awaitingInput,
  ConversationWatch,
  createConversation,
  rest,
  seenEvent,
  sendUntilAccepted,
  untilState,
  type Accepted,
  type WireEvent,
} from './failoverClients.ts';
import type { TetherNode } from './failoverNodes.ts';
import { startTetherCluster } from './tetherCluster.ts';

/** The command that keeps a conversation mid-task: it marks its start, then outlives the round. */
const MID_TASK_COMMAND = '!touch failover-started && sleep 600';
const MID_TASK_MARK = 'failover-started';

export interface FailoverCluster {
  /** Node a: creates and owns the conversations, killed every round. */
  owner: TetherNode;
  /** Nodes b and c. */
  survivors: readonly [TetherNode, TetherNode];
  /** One token (and user) per conversation of a round. */
  tokens: readonly string[];
  workspaces: string;
  leaseMs: number;
  /** The cluster's heartbeats, read by the bench to see a's age out. */
  heartbeats: ClusterStore;
  stop(): Promise<void>;
}

/** The cluster of three nodes, with a user per conversation (default limits apply per user). */
export async function startFailoverCluster(options: { leaseMs: number; users: number }): Promise<FailoverCluster> {
  const cl = await startTetherCluster({
    label: 'failover',
    users: options.users,
    env: { TETHER_LEASE_MS: String(options.leaseMs), TETHER_LOG_LEVEL: 'info' },
  });
  try {
    const [owner, ...survivors] = cl.nodes;
    return {
      owner,
      survivors,
      tokens: cl.tokens,
      workspaces: cl.workspaces,
      leaseMs: options.leaseMs,
      heartbeats: await kvClusterStore(cl.nc, { leaseMs: options.leaseMs }),
      stop: cl.stop,
    };
  } catch (err) {
    await cl.stop();
    throw err;
  }
}

/** One conversation of one kill round; times in ms. */
export interface Sample {
  conversationId: string;
  midTask: boolean;
  /** No kill: from sending a message through b or c to its answer reaching the ws client there. */
  baselineMs: number;
  /** From the kill to a node's 202 for the message. */
  acceptedMs: number;
  /** From the kill to the answer to the message reaching the ws client on b or c. */
  answerMs: number;
  /** From the kill to the first `conversation taken over` of it (b's or c's log); a claim of a released record logs none. */
  claimMs: number | undefined;
  /** From the kill to the first `session rehydrated` of it on b or c. */
  rehydratedMs: number | undefined;
  attempts: number;
  /** The message stored once and answered once (REST read through b or c). */
  storedOnce: boolean;
}

export interface KillRound {
  /** From the kill to the first read that found a's heartbeat gone. */
  heartbeatGoneMs: number;
  /** From the kill to the first `nodes gone` naming a, on b or c. */
  nodesGoneMs: number | undefined;
  samples: Sample[];
}

/** One conversation of a round, and the survivor its ws client is on and its messages go through first. */
interface Subject {
  index: number;
  id: string;
  token: string;
  via: TetherNode;
  other: TetherNode;
  midTask: boolean;
  watch: ConversationWatch;
}

/** What became of a conversation's message after the kill. */
interface AfterKill {
  content: string;
  accepted: Accepted;
  answerAt: number;
}

/**
 * One round: `n` conversations created through a, a baseline message to each
 * through b or c, every other one set running a command, kill -9 of a, each
 * conversation's next message through b or c until answered; then a again.
 */
export async function killRound(cl: FailoverCluster, round: number, n: number, timeoutMs: number): Promise<KillRound> {
  const subjects = await setUp(cl, n, Date.now() + timeoutMs);
  try {
    const setUpBy = Date.now() + timeoutMs;
    const baselineMs = await Promise.all(subjects.map((s) => baseline(s, `baseline ${round} ${s.index}`, setUpBy)));
    await Promise.all(subjects.filter((s) => s.midTask).map((s) => startCommand(cl, s, setUpBy)));

    const killedAt = Date.now();
    const by = killedAt + timeoutMs;
    const killed = cl.owner.kill();
    const heartbeatGone = untilHeartbeatGone(cl, by);
    const after = await Promise.all(subjects.map((s) => messageAfterKill(cl, s, `failover ${round} ${s.index}`, by)));
    const heartbeatGoneAt = await heartbeatGone;
    await killed;
    // The log lines of the last rehydrations may still be in the pipe.
    await sleep(200);
    const samples = await Promise.all(subjects.map((s, i) => sampleOf(cl, s, killedAt, baselineMs[i]!, after[i]!)));
    const gone = (f: Record<string, unknown>) => (f.nodes as string[]).includes(cl.owner.name);
    const nodesGoneMs = since(killedAt, firstAt(cl.survivors, 'nodes gone', killedAt, gone));
    await cl.owner.restart();
    // b and c list the nodes every lease/4: they must see a back before the next kill.
    await sleep(cl.leaseMs / 2);
    return { heartbeatGoneMs: heartbeatGoneAt - killedAt, nodesGoneMs, samples };
  } finally {
    for (const s of subjects) s.watch.close();
  }
}

/** `n` conversations created through a, each ready, each with a ws client on b or c (alternately). */
async function setUp(cl: FailoverCluster, n: number, deadline: number): Promise<Subject[]> {
  const { owner, survivors, tokens } = cl;
  const limit = pLimit(8);
  const ids = await Promise.all(tokens.slice(0, n).map((t) => limit(() => createConversation(owner.base, t, 10_000))));
  // The ws clients join once the start-up events are stored: one that joins on b
  // while a still writes them can miss the last ones until the next event comes
  // (its history stops at the high-water mark read before it subscribed).
  await Promise.all(ids.map((id, i) => untilState(owner.base, tokens[i]!, id, 'awaiting_user_input', deadline)));
  return Promise.all(
    ids.map(async (id, index) => {
      const [via, other] = index % 2 === 0 ? survivors : [survivors[1], survivors[0]];
      const token = tokens[index]!;
      const watch = await ConversationWatch.open(via.wsBase, token, id);
      return { index, id, token, via, other, midTask: index % 2 === 1, watch };
    }),
  );
}

/** With every node up: from sending a message through b or c to its answer at the ws client there. */
async function baseline(s: Subject, content: string, deadline: number): Promise<number> {
  const sent = Date.now();
  await sendUntilAccepted([s.via.base], s.token, s.id, { content, clientId: content }, 10_000, deadline);
  const answer = await s.watch.arrival(answers(content), deadline, 'baseline answer');
  await s.watch.arrival(awaitingInput, deadline, 'wait after the baseline', answer.seq);
  return answer.at - sent;
}

/** Sends the long command through a and waits until it runs (its mark is in the shared workspace). */
async function startCommand(cl: FailoverCluster, s: Subject, deadline: number): Promise<void> {
  const message = { content: MID_TASK_COMMAND, clientId: `run ${s.id}` };
  await sendUntilAccepted([cl.owner.base], s.token, s.id, message, 10_000, deadline);
  const mark = join(cl.workspaces, s.id, MID_TASK_MARK);
  const exists = () =>
    access(mark).then(
      () => true,
      () => false,
    );
  while (!(await exists())) {
    if (Date.now() > deadline) throw new Error(`${s.id}: the command did not start`);
    await sleep(20);
  }
}

/** From the kill on: the message through b or c until accepted, then its answer at the ws client. */
async function messageAfterKill(
  cl: FailoverCluster,
  s: Subject,
  content: string,
  deadline: number,
): Promise<AfterKill> {
  const bases = [s.via.base, s.other.base];
  const accepted = await sendUntilAccepted(
    bases,
    s.token,
    s.id,
    { content, clientId: content },
    4 * cl.leaseMs,
    deadline,
  );
  const answer = await s.watch.arrival(answers(content), deadline, 'answer after the kill');
  return { content, accepted, answerAt: answer.at };
}

async function sampleOf(
  cl: FailoverCluster,
  s: Subject,
  killedAt: number,
  baselineMs: number,
  after: AfterKill,
): Promise<Sample> {
  const first = (msg: string) => firstAt(cl.survivors, msg, killedAt, (f) => f.conversation_id === s.id);
  return {
    conversationId: s.id,
    midTask: s.midTask,
    baselineMs,
    acceptedMs: after.accepted.at - killedAt,
    answerMs: after.answerAt - killedAt,
    claimMs: since(killedAt, first('conversation taken over')),
    rehydratedMs: since(killedAt, first('session rehydrated')),
    attempts: after.accepted.attempts,
    storedOnce: await storedOnce(s.via.base, s.token, s.id, after.content),
  };
}

/** When a's heartbeat was first found gone, reading it every 10 ms. */
async function untilHeartbeatGone(cl: FailoverCluster, deadline: number): Promise<number> {
  while (Date.now() < deadline) {
    if (!(await cl.heartbeats.alive(cl.owner.name))) return Date.now();
    await sleep(10);
  }
  throw new Error(`the heartbeat of ${cl.owner.name} was still there ${deadline} ms after the kill`);
}

/** The earliest line with this message on any of the nodes from `since` on, that passes `test`. */
function firstAt(
  nodes: readonly TetherNode[],
  msg: string,
  from: number,
  test: (fields: Record<string, unknown>) => boolean,
): number | undefined {
  const ats = nodes.flatMap((node) =>
    node
      .lines(msg, from)
      .filter((l) => test(l.fields))
      .map((l) => l.at),
  );
  return ats.length > 0 ? Math.min(...ats) : undefined;
}

const since = (from: number, at: number | undefined) => (at === undefined ? undefined : at - from);

/** The user message with this content stored once, and the agent's answer to it once. */
async function storedOnce(base: string, token: string, id: string, content: string): Promise<boolean> {
  const res = await rest<{ items: Array<{ seq: number; event: WireEvent }> }>(
    base,
    token,
    'GET',
    `/api/conversations/${id}/events?after_seq=0&limit=1000`,
    undefined,
    10_000,
  );
  if (res.status !== 200) throw new Error(`reading ${id}'s events answered ${res.status}`);
  const events = res.body.items.map((item) => seenEvent(item.seq, item.event));
  const mine = events.filter((e) => e.source === 'user' && e.type === 'message' && e.content === content);
  return mine.length === 1 && events.filter(answers(content)).length === 1;
}
