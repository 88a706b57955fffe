// The cluster step's scenario (rows k and l): three `tether serve` nodes on a
// 3-node NATS cluster (tetherCluster.ts); each conversation is created through
// the node that is to own it; ws clients in the bench's client process
// (clientFleet.ts), the sender on the owner and a watcher on the owner or on
// another node. The agent thinks for ten minutes after a conversation's first
// message, so each further user action is stored and delivered as exactly one
// event. The rows and their prose: clusterRows.ts.
import { performance } from 'node:perf_hooks';
import { jetstreamManager } from '@nats-io/jetstream';
import pLimit from 'p-limit';
import type { ClientFleet, ClientSpec } from './clientFleet.ts';
import { createConversation, rest, untilState } from './failoverClients.ts';
import type { TetherNode } from './failoverNodes.ts';
import { percentile } from './latencyStats.ts';
import { fmt, processesCpuMeter, within, type ProcessesCpu } from './measure.ts';
import { restEvents, settledSeq, verifyFrames, type GetJson } from './storedEvents.ts';
import type { TetherCluster } from './tetherCluster.ts';

/** What the step's nodes read besides the cluster's own settings (tetherCluster.ts). */
export const CLUSTER_NODE_ENV: Readonly<Record<string, string>> = {
  // Ignored by a server that does not know it yet: the replicas used are read back from the streams.
  TETHER_REPLICAS: '3',
  // The first message sets the agent thinking for ten minutes: user actions only from then on.
  TETHER_AGENT_DELAY_MS: String(10 * 60_000),
  // The per-connection frame limit (100/s by default) must not pace the senders of (l).
  TETHER_WS_FRAMES_PER_SECOND: '1000000',
  TETHER_WS_FRAME_BURST: '1000000',
  TETHER_LOG_LEVEL: 'warn',
};

/** A conversation, the node that owns it (it was created through it), and where its clients start. */
export interface Placed {
  /** Its user's index among the cluster's tokens; also picks its messages' text. */
  index: number;
  id: string;
  token: string;
  owner: TetherNode;
  /** The last seq its clients have seen; moves past each run's events. */
  cursor: number;
}

/** REST reads through `base` as the token's user. */
const restGet =
  (base: string, token: string): GetJson =>
  async <T>(path: string) => {
    const res = await rest<T>(base, token, 'GET', path, undefined, 10_000);
    if (res.status !== 200) throw new Error(`GET ${path} through ${base} answered ${res.status}`);
    return res.body;
  };

/**
 * One conversation per owner given, for the users from `firstUser` on, each
 * created through its owner and started up; checks that each is in its owner's
 * memory (the owner runs its session).
 */
export async function createOwned(
  cl: TetherCluster,
  owners: readonly TetherNode[],
  firstUser: number,
  timeoutMs: number,
): Promise<Placed[]> {
  const deadline = performance.now() + timeoutMs;
  const limit = pLimit(8);
  return within(
    timeoutMs,
    `creating ${owners.length} conversations`,
    Promise.all(
      owners.map((owner, i) =>
        limit(async () => {
          const index = firstUser + i;
          const token = cl.tokens[index]!;
          const id = await createConversation(owner.base, token, 10_000);
          const get = restGet(owner.base, token);
          const cursor = await settledSeq(get, id, deadline);
          const info = await get<{ in_memory: boolean }>(`/api/conversations/${id}`);
          if (!info.in_memory) throw new Error(`${id}, created through ${owner.name}, is not in its memory`);
          return { index, id, token, owner, cursor };
        }),
      ),
    ),
  );
}

/** The node after `node` in a, b, c order (c's next is a). */
export function nextNode(cl: TetherCluster, node: TetherNode): TetherNode {
  return cl.nodes[(cl.nodes.indexOf(node) + 1) % cl.nodes.length]!;
}

/** Per conversation: the sender on its owner, then one watcher on the node `watcherOn` picks. */
function clientSpecs(set: readonly Placed[], watcherOn: (p: Placed) => TetherNode): ClientSpec[] {
  return set.flatMap((p) => {
    const client = { auth: `token=${p.token}`, conversationId: p.id, afterSeq: p.cursor, index: p.index };
    return [
      { ...client, sends: true, wsBase: p.owner.wsBase },
      { ...client, sends: false, wsBase: watcherOn(p).wsBase },
    ];
  });
}

/** Connects the clients (each to its own node), runs `work`, and closes them whatever happened. */
async function withClients<T>(
  cl: TetherCluster,
  fleet: ClientFleet,
  specs: ClientSpec[],
  timeoutMs: number,
  work: () => Promise<T>,
): Promise<T> {
  await within(timeoutMs, 'connecting the clients', fleet.connect(cl.nodes[0].wsBase, specs));
  try {
    return await work();
  } finally {
    await fleet.close().catch(() => undefined);
  }
}

/**
 * Every client's frames against the log read through the owner; moves each
 * cursor past the run's events and returns how many were stored.
 */
async function checkAndAdvance(fleet: ClientFleet, set: readonly Placed[], timeoutMs: number): Promise<number> {
  const received = await within(timeoutMs, 'collecting the frames', fleet.frames());
  const logs = await within(
    timeoutMs,
    'reading the logs',
    Promise.all(set.map((p) => restEvents(restGet(p.owner.base, p.token), p.id, p.cursor))),
  );
  let events = 0;
  set.forEach((p, i) => {
    const stored = logs[i]!;
    // clientSpecs' order: two clients per conversation.
    verifyFrames(p.id, stored, received[2 * i]!);
    verifyFrames(p.id, stored, received[2 * i + 1]!);
    events += stored.length;
    p.cursor = stored.at(-1)?.seq ?? p.cursor;
  });
  return events;
}

/** CPU of the three Tether nodes, the three nats-servers and the client process. */
function clusterCpuMeter(cl: TetherCluster, fleet: ClientFleet): () => ProcessesCpu {
  const pids: Record<string, number> = { clients: fleet.pid };
  for (const node of cl.nodes) pids[node.name] = node.pid;
  for (const server of cl.nats.servers) pids[`nats ${server.name}`] = server.pid;
  return processesCpuMeter(pids);
}

/**
 * Each conversation's first user action, untimed: it sets the agent thinking
 * (a state fact, the cluster-wide count of the user's running conversations).
 * Waits until each log says `running`, then moves the cursors to its end.
 */
export async function firstActions(
  cl: TetherCluster,
  fleet: ClientFleet,
  set: readonly Placed[],
  timeoutMs: number,
): Promise<void> {
  const specs = clientSpecs(set, (p) => p.owner);
  await withClients(cl, fleet, specs, timeoutMs, async () => {
    await within(timeoutMs, 'the first actions', fleet.run(1, 1, false));
    const deadline = Date.now() + timeoutMs;
    await Promise.all(
      set.map(async (p) => {
        await untilState(p.owner.base, p.token, p.id, 'running', deadline);
        const info = await restGet(p.owner.base, p.token)<{ last_seq: number }>(`/api/conversations/${p.id}`);
        p.cursor = info.last_seq;
      }),
    );
  });
}

export interface DeliveryPlan {
  messagesPerConversation: number;
  perSecond: number;
  timeoutMs: number;
}

export interface DeliveryRun {
  /** Per user action, ms from due to the event frame at the sender, on the owner. */
  owner: Float64Array;
  /** The same at the watcher on another node. */
  nonOwner: Float64Array;
  sendLags: Float64Array;
  ms: number;
  events: number;
  cpu: ProcessesCpu;
  summary: string;
}

/**
 * Row (k): the sender of each conversation on its owner, a watcher on the next
 * node; open loop at `perSecond` user actions a second in all (latencyPacing.ts).
 */
export async function deliveryRun(
  cl: TetherCluster,
  fleet: ClientFleet,
  set: readonly Placed[],
  plan: DeliveryPlan,
): Promise<DeliveryRun> {
  const specs = clientSpecs(set, (p) => nextNode(cl, p.owner));
  return withClients(cl, fleet, specs, plan.timeoutMs, async () => {
    const cpu = clusterCpuMeter(cl, fleet);
    const paced = await within(
      plan.timeoutMs,
      'the paced run',
      fleet.paced(plan.messagesPerConversation, plan.perSecond),
    );
    const used = cpu();
    const events = await checkAndAdvance(fleet, set, plan.timeoutMs);
    const [owner, nonOwner] = paced.memberLatencies;
    if (!owner || !nonOwner) throw new Error('the paced run came back without both clients’ latencies');
    const summary = `${fmt.int(events)} events in ${fmt.ms(paced.ms)} ms; to the owner ${latencies(owner)}, to another node ${latencies(nonOwner)} (${describeClusterCpu(used)})`;
    return { owner, nonOwner, sendLags: paced.sendLags, ms: paced.ms, events, cpu: used, summary };
  });
}

export interface ThroughputPlan {
  messagesPerConversation: number;
  /** User actions each sender keeps in flight. */
  window: number;
  timeoutMs: number;
}

export interface ThroughputRun {
  events: number;
  ms: number;
  perSecond: number;
  cpu: ProcessesCpu;
  summary: string;
}

/**
 * Row (l): every sender on its conversation's owner keeps `window` user actions
 * in flight; the run ends when every watcher (on the node `watcherOn` picks)
 * has the sender's last event. Stored events/s over the client process's timing.
 */
export async function throughputRun(
  cl: TetherCluster,
  fleet: ClientFleet,
  set: readonly Placed[],
  watcherOn: (p: Placed) => TetherNode,
  plan: ThroughputPlan,
): Promise<ThroughputRun> {
  return withClients(cl, fleet, clientSpecs(set, watcherOn), plan.timeoutMs, async () => {
    const cpu = clusterCpuMeter(cl, fleet);
    const ms = await within(
      plan.timeoutMs,
      'the throughput run',
      fleet.run(plan.messagesPerConversation, plan.window, false),
    );
    const used = cpu();
    const events = await checkAndAdvance(fleet, set, plan.timeoutMs);
    const perSecond = (events / ms) * 1000;
    const summary = `${fmt.int(events)} events in ${fmt.ms(ms)} ms = ${fmt.int(perSecond)} events/s (${describeClusterCpu(used)})`;
    return { events, ms, perSecond, cpu: used, summary };
  });
}

/** Nearest-rank p50 and p99, in one line. */
export const latencies = (ms: ArrayLike<number>) =>
  `p50 ${fmt.ms(percentile(ms, 50))} ms, p99 ${fmt.ms(percentile(ms, 99))} ms`;

/** CPU ms per process over a run, in one line. */
export function describeClusterCpu(cpu: ProcessesCpu): string {
  const named = Object.entries(cpu.byName).map(([name, ms]) => `${name} ${fmt.int(ms)}`);
  return `cpu ms: ${named.join(', ')}, other processes ${fmt.int(cpu.restMs)}, over ${fmt.int(cpu.wallMs)} ms`;
}

/** Every stream on the NATS cluster with its replicas (the event stream and the KV buckets' streams). */
export async function streamReplicas(cl: TetherCluster): Promise<Map<string, number>> {
  const jsm = await jetstreamManager(cl.nc);
  const replicas = new Map<string, number>();
  for await (const info of jsm.streams.list()) replicas.set(info.config.name, info.config.num_replicas);
  return replicas;
}
