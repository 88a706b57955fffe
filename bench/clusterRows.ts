// The cluster step: rows (k) and (l) on three `tether serve` nodes and a
// 3-node NATS cluster. (k) how much later an event reaches a ws client on a
// node that does not own the conversation than the sender on its owner, open
// loop at a modest rate; (l) append-and-deliver throughput with the load spread
// over the three nodes against the same load on one of them, on the same NATS
// cluster and the same cores. The scenario: clusterBench.ts.
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { DEFAULT_STREAM } from '../src/store/index.ts';
import type { BenchContext, Measured } from './benchContext.ts';
import { ClientFleet } from './clientFleet.ts';
import {
  CLUSTER_NODE_ENV,
  createOwned,
  deliveryRun,
  firstActions,
  latencies,
  nextNode,
  streamReplicas,
  throughputRun,
  type DeliveryRun,
  type Placed,
  type ThroughputRun,
} from './clusterBench.ts';
import { percentile } from './latencyStats.ts';
import {
  busyMachine,
  fmt,
  median,
  noiseNote,
  progress,
  repeat,
  within,
  type Repeated,
  type Repetitions,
} from './measure.ts';
import type { Row } from './report.ts';
import { startTetherCluster, type TetherCluster } from './tetherCluster.ts';

interface Plan {
  /** (k): conversations, user actions each, the open loop's rate in all. */
  delivery: { conversations: number; messagesPerConversation: number; perSecond: number; reps: Repetitions };
  /** (l): conversations per side, user actions per sender and run, in flight per sender; a repetition runs both sides. */
  throughput: { conversations: number; messagesPerConversation: number; window: number; reps: Repetitions };
}

function planOf(ctx: BenchContext): Plan {
  return ctx.quick
    ? {
        delivery: { conversations: 15, messagesPerConversation: 15, perSecond: 150, reps: { warmups: 0, runs: 1 } },
        throughput: { conversations: 30, messagesPerConversation: 30, window: 8, reps: { warmups: 1, runs: 1 } },
      }
    : {
        delivery: { conversations: 30, messagesPerConversation: 40, perSecond: 150, reps: { warmups: 0, runs: 1 } },
        throughput: { conversations: 60, messagesPerConversation: 100, window: 8, reps: { warmups: 1, runs: 3 } },
      };
}

/** One repetition of (l): the load spread over the three nodes, then the same load on node a. */
interface ThroughputPair {
  spread: ThroughputRun;
  one: ThroughputRun;
  summary: string;
}

const busyPair = (p: ThroughputPair) => busyMachine(p.spread.cpu) || busyMachine(p.one.cpu);

export async function measureCluster(ctx: BenchContext): Promise<Measured> {
  const plan = planOf(ctx);
  const { delivery: k, throughput: l } = plan;
  const load = loadavg()[0]!;
  const started = performance.now();
  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
  progress(
    `cluster: 3 nats-servers, 3 tether nodes; (k) ${k.conversations} conversations at ${k.perSecond} actions/s, (l) ${l.conversations} conversations on 3 nodes vs on 1`,
  );
  const cl = await within(
    ctx.stepTimeoutMs,
    'cluster: starting the cluster',
    startTetherCluster({
      label: 'cluster',
      users: k.conversations + 2 * l.conversations,
      env: { ...CLUSTER_NODE_ENV },
    }),
  );
  progress(`cluster: up after ${elapsed()}`);
  const fleet = ClientFleet.start();
  try {
    const timeoutMs = ctx.stepTimeoutMs;
    const spread = (n: number) => Array.from({ length: n }, (_, i) => cl.nodes[i % cl.nodes.length]!);
    const [a] = cl.nodes;
    const toNext = (p: Placed) => nextNode(cl, p.owner);
    const deliverySet = await createOwned(cl, spread(k.conversations), 0, timeoutMs);
    const spreadSet = await createOwned(cl, spread(l.conversations), k.conversations, timeoutMs);
    const oneSet = await createOwned(
      cl,
      Array.from({ length: l.conversations }, () => a),
      k.conversations + l.conversations,
      timeoutMs,
    );
    progress(`cluster: ${k.conversations + 2 * l.conversations} conversations started after ${elapsed()}`);

    // A conversation's first action sets its agent thinking (a state fact, the cluster-wide running count): not timed in (k).
    await firstActions(cl, fleet, deliverySet, timeoutMs);
    const delivery = await repeat(
      'cluster (k)',
      k.reps,
      () => deliveryRun(cl, fleet, deliverySet, { ...k, timeoutMs }),
      (r) => busyMachine(r.cpu),
    );
    const throughput = { ...l, timeoutMs };
    // The two sides alternate, so that neither has the machine's better minutes.
    const pairs = await repeat(
      'cluster (l)',
      l.reps,
      async (): Promise<ThroughputPair> => {
        const spreadRun = await throughputRun(cl, fleet, spreadSet, toNext, throughput);
        const oneRun = await throughputRun(cl, fleet, oneSet, () => a, throughput);
        return { spread: spreadRun, one: oneRun, summary: `3 nodes ${spreadRun.summary}; 1 node ${oneRun.summary}` };
      },
      busyPair,
    );

    progress(`cluster: runs done after ${elapsed()}`);
    const replicas = await streamReplicas(cl);
    const eventReplicas = replicas.get(DEFAULT_STREAM);
    if (eventReplicas === undefined) throw new Error(`no stream ${DEFAULT_STREAM} on the NATS cluster`);
    report(ctx, cl, plan, { delivery, pairs, replicas, load });
    return {
      rows: [deliveryRow(plan, delivery.kept, eventReplicas), throughputRow(plan, pairs.kept, eventReplicas)],
      profiles: [],
    };
  } finally {
    fleet.stop();
    // Nothing to keep: kill -9 rather than three drains that would each hand their conversations to the others.
    await Promise.all(cl.nodes.map((node) => node.kill().catch(() => undefined)));
    await cl.stop();
  }
}

/** Every run's latencies of one client, together. */
const joined = (runs: readonly DeliveryRun[], pick: (r: DeliveryRun) => Float64Array) =>
  Float64Array.from(runs.flatMap((r) => Array.from(pick(r))));

function deliveryRow(plan: Plan, runs: readonly DeliveryRun[], replicas: number): Row {
  const k = plan.delivery;
  const owner = joined(runs, (r) => r.owner);
  const nonOwner = joined(runs, (r) => r.nonOwner);
  const p99Ratio = percentile(nonOwner, 99) / percentile(owner, 99);
  return {
    measurement: `(k) delivery on a non-owner node: from a user action due to be sent (ws, open loop, ${k.perSecond} actions/s in all over ${k.conversations} conversations, ${k.messagesPerConversation} each; the sender on the conversation's owner node) to its event frame at a ws client on another node, vs at the sender on the owner; 3 \`tether serve\` on a 3-node NATS cluster, event stream R${replicas}; ratio of the p50s (the p99s' ratio in the Tether column)`,
    tether: `${latencies(nonOwner)} (p99 ratio ${fmt.ratio(p99Ratio)})`,
    baseline: `${latencies(owner)} on the owner`,
    ratio: percentile(nonOwner, 50) / percentile(owner, 50),
    target: '— (no target)',
  };
}

function throughputRow(plan: Plan, pairs: readonly ThroughputPair[], replicas: number): Row {
  const l = plan.throughput;
  const spread = median(pairs.map((p) => p.spread.perSecond));
  const one = median(pairs.map((p) => p.one.perSecond));
  return {
    measurement: `(l) append and deliver, 3 Tether nodes vs 1: ${l.conversations} conversations, a third created through (so owned by) each node, the sender on the owner keeping ${l.window} user actions in flight and a watcher on the next node; vs the same load with every conversation and both clients on node a (b and c up and idle); the same 3-node NATS cluster (event stream R${replicas}) and the same ${cpus().length} cores, stored events/s (median of ${pairs.length}). Not a scale-out figure: the three nodes and the three nats-servers share the cores, so the ratio is what the cluster's routing and fan-out cost (1 would be free, below 1 is their price)`,
    tether: `${fmt.int(spread)} events/s on 3 nodes`,
    baseline: `${fmt.int(one)} events/s on 1 node`,
    ratio: spread / one,
    target: '— (no target)',
  };
}

interface Measurements {
  delivery: Repeated<DeliveryRun>;
  pairs: Repeated<ThroughputPair>;
  replicas: Map<string, number>;
  load: number;
}

/** Median CPU per stored event (µs) of the processes `pick` selects, over runs. */
function cpuPerEvent(runs: readonly ThroughputRun[], pick: (name: string) => boolean): string {
  const us = runs.map((r) => {
    const ms = Object.entries(r.cpu.byName)
      .filter(([name]) => pick(name))
      .reduce((sum, [, v]) => sum + v, 0);
    return (ms / r.events) * 1000;
  });
  return fmt.int(median(us));
}

const perEvent = (runs: readonly ThroughputRun[]) =>
  `the Tether nodes ${cpuPerEvent(runs, (n) => n.startsWith('node-'))}, the nats-servers ${cpuPerEvent(runs, (n) => n.startsWith('nats '))}, the clients ${cpuPerEvent(runs, (n) => n === 'clients')}`;

function report(ctx: BenchContext, cl: TetherCluster, plan: Plan, m: Measurements): void {
  const { delivery: k, throughput: l } = plan;
  const runs = m.delivery.kept;
  const owner = joined(runs, (r) => r.owner);
  const extra = Float64Array.from(
    joined(runs, (r) => r.nonOwner),
    (ms, i) => ms - owner[i]!,
  );
  const pairs = m.pairs.kept;
  const idle = pairs.map((p) => fmt.int((p.one.cpu.byName['node-b'] ?? 0) + (p.one.cpu.byName['node-c'] ?? 0)));
  ctx.notes.push(
    `Cluster (k): per user action, its arrival at the other node minus its arrival at the sender on the owner (one clock): ${latencies(extra)}; the senders were behind their schedule by p99 ${fmt.ms(
      percentile(
        joined(runs, (r) => r.sendLags),
        99,
      ),
    )} ms (inside both latencies). Every node, the owner included, hands events to its clients from its one follow of the event stream (one consumer per node, pulled through whichever of the three nats-servers its connection picked): the owner's own appends take the same path as everyone else's.`,
    `Cluster (l), CPU per stored event (median, µs): 3 nodes: ${perEvent(pairs.map((p) => p.spread))}; 1 node: ${perEvent(pairs.map((p) => p.one))}. On 3 nodes every node runs the follow (its watchers' conversations are owned elsewhere), so each of the three receives every event of the stream; on 1 node only node a follows the stream, for both clients. During the 1-node runs b and c used ${idle.join(', ')} ms of CPU together (heartbeats only: no clients, no session that acts).`,
    noiseNote('cluster (k)', runs.length, m.delivery.discarded.length, runs.filter((r) => busyMachine(r.cpu)).length),
    noiseNote('cluster (l)', pairs.length, m.pairs.discarded.length, pairs.filter(busyPair).length),
    `Cluster streams and their replicas at the end of the step (read from JetStream): ${[...m.replicas].map(([name, r]) => `${name} R${r}`).join(', ')}. The nodes were given TETHER_REPLICAS=3; a server that does not read it keeps its default.`,
    `Cluster (k, l) ran on ${cpus().length} cores shared by 3 nats-servers, 3 Tether nodes, the client process and the bench; load average ${m.load.toFixed(2)} at its start, ${loadavg()[0]!.toFixed(2)} at its end.`,
  );
  ctx.runs.push(
    ...runs.map((r, i) => `cluster (k) run ${i + 1}: ${r.summary}`),
    ...pairs.map((p, i) => `cluster (l) run ${i + 1}: ${p.summary}`),
  );
  const env = Object.entries(CLUSTER_NODE_ENV).map(([key, value]) => `${key}=${value}`);
  const reps = (r: Repetitions) => `${r.warmups} warm-up + ${r.runs} measured run${r.runs === 1 ? '' : 's'}`;
  ctx.settings.push(
    `Cluster (k, l): a 3-node NATS cluster as in (j) and three \`tether serve\` processes (${cl.nodes.map((n) => n.name).join(', ')}; NATS_URL listing the three servers, ${env.join(', ')}, default lease, local runtimes, scripted agent, one token and user per conversation). Each conversation is created through the node that is to own it and checked to be in that node's memory; its clients start after its start-up events. The agent thinks for ten minutes after a conversation's first message, so every further user action is stored and delivered as exactly one event. Clients: one node process of their own (\`bench/clientProcess\`), each conversation's sender on its owner node; after each run every client's event frames are checked against the log read over REST (same seqs, same JSON, none missing or extra). A run during which other processes used over 20% of a core is run again, as in (a).`,
    `Cluster (k): ${k.conversations} conversations, a third owned by each node; the sender on the owner and a watcher on the next node (a → b → c → a). One untimed user action per conversation first (it sets the agent thinking). Then open loop from the client process: action m of conversation c due at (m × ${k.conversations} + c) / ${k.perSecond} s and sent when due whatever came back; its latency to each client is from when it was due to its event frame there (one clock). p50 and p99 by nearest rank over the ${fmt.int(k.conversations * k.messagesPerConversation)} actions of each run; ${reps(k.reps)}.`,
    `Cluster (l): ${l.conversations} conversations per side, each with its sender on the owner and a watcher. 3 nodes: a third created through each node, the watcher on the next node. 1 node: all created through node a, both clients on a, b and c up with nothing to do. A run: every sender sends ${l.messagesPerConversation} user actions with at most ${l.window} in flight, and ends when every watcher has its sender's last event (the client process's timing); stored events/s = the events stored after the clients' cursors ÷ that time. A repetition runs the 3-node side then the 1-node side, on the same conversations each time; ${reps(l.reps)}, median per side. Both sides use the same nodes, NATS cluster and streams.`,
  );
}
