// (k, l) Three `tether serve` on a 3-node NATS cluster. (k) How much later an event reaches a ws client on another
// node than the sender on the owner; (l) append and deliver spread over the three nodes vs all on one of them.
import { performance } from 'node:perf_hooks';
import { jetstreamManager } from '@nats-io/jetstream';
import pLimit from 'p-limit';
import { DEFAULT_STREAM } from '../../src/store/index.ts';
import { startCluster, type TetherCluster, type TetherNode } from '../harness/cluster.ts';
import { close, frames, Fleet, plug, run, TetherMember, type ClientSpec } from '../harness/fleet.ts';
import { checkFrames, rest, startedConversation } from '../harness/host.ts';
import { fmt, median, percentile, timed, until, type Timed } from '../harness/measure.ts';
import { per, repeat, reps, type Scenario } from '../harness/scenario.ts';

const SETTINGS = `TETHER_REPLICAS=3 TETHER_AGENT_DELAY_MS=${10 * 60_000} TETHER_WS_FRAMES_PER_SECOND=1000000 TETHER_WS_FRAME_BURST=1000000 TETHER_LOG_LEVEL=warn`;
const ENV = Object.fromEntries(SETTINGS.split(' ').map((kv) => kv.split('=') as [string, string]));
// Fleet side: per conversation its sender and a watcher, the fleet's clients; (k) times each action to each of the two.
let pairs: TetherMember[][] = [];
export async function connectPairs(specs: ClientSpec[]): Promise<void> {
  const one = (spec: ClientSpec) =>
    new Promise<TetherMember>((ok, no) => {
      const m: TetherMember = new TetherMember(spec, (err) => (err ? no(err) : ok(m)));
    });
  const members = await Promise.all(specs.map(one));
  plug((pairs = members.flatMap((m, i) => (i % 2 ? [] : [[m, members[i + 1]!]]))));
}
export function pacedPairs(messages: number, perSecond: number): Promise<[Float64Array, Float64Array]> {
  const [n, total, t0] = [pairs.length, pairs.length * messages, performance.now() + 5];
  const ms: [Float64Array, Float64Array] = [new Float64Array(total), new Float64Array(total)];
  const due = (g: number) => t0 + (g * 1000) / perSecond;
  let [next, left, timer] = [0, 2 * total, setTimeout(() => undefined, 0)];
  return new Promise<[Float64Array, Float64Array]>((resolve, reject) => {
    for (const [c, pair] of pairs.entries())
      for (const [j, m] of pair.entries()) {
        m.reached(Number.MAX_SAFE_INTEGER).catch(reject);
        m.onArrival = (k) => {
          ms[j]![k * n + c] = performance.now() - due(k * n + c);
          if (--left === 0) resolve(ms);
        };
      }
    const tick = () => {
      for (; next < total && due(next) <= performance.now(); next++) pairs[next % n]![0]!.send(Math.floor(next / n));
      if (next < total) timer = setTimeout(tick, Math.max(0, due(next) - performance.now()));
    };
    timer = setTimeout(tick, 5);
  }).finally(() => clearTimeout(timer));
}
type Placed = { index: number; conversationId: string; user: string; afterSeq: number; owner: TetherNode };
const next = (cl: TetherCluster, node: TetherNode) => cl.nodes[(cl.nodes.indexOf(node) + 1) % cl.nodes.length]!;
const path = (p: Placed, then = '') => `/api/conversations/${p.conversationId}${then}`;
/** A conversation per owner given (users from `first` on), created through it, started, in its memory. */
async function place(cl: TetherCluster, owners: TetherNode[], first: number): Promise<Placed[]> {
  const one = async (owner: TetherNode, index: number, token = cl.tokens[index]!): Promise<Placed> => {
    const { id, seq } = await startedConversation(owner.base, token, {});
    const info = await rest<{ in_memory: boolean }>(owner.base, token, `/api/conversations/${id}`);
    if (!info.in_memory) throw new Error(`${id}, created through ${owner.name}, is not in its memory`);
    return { index, conversationId: id, user: token, afterSeq: seq, owner };
  };
  const limit = pLimit(8);
  return Promise.all(owners.map((o, i) => limit(() => one(o, first + i))));
}
/** Each conversation's first action, untimed (it sets the agent thinking: a state fact); the cursors move past it. */
async function firstActions(set: Placed[]): Promise<void> {
  for (const p of set) {
    await rest(p.owner.base, p.user, path(p, '/actions'), { action: { type: 'message', content: 'first' } });
    const info = () => rest<{ state: string; last_seq: number }>(p.owner.base, p.user, path(p));
    p.afterSeq = await until('running', () => info().then((x) => (x.state === 'running' ? x.last_seq : undefined)));
  }
}
const spec = ({ owner: _, ...p }: Placed, w: TetherNode, sends: boolean): ClientSpec => ({ ...p, ws: w.ws, sends });
/** Per conversation the sender on its owner and a watcher on `on(p)`; times `work`; checks every client's frames against the log read through the owner; moves the cursors past them. */
async function clients<T>(fleet: Fleet, set: Placed[], on: (p: Placed) => TetherNode, work: () => Promise<T>) {
  const specs = set.flatMap((p) => [spec(p, p.owner, true), spec(p, on(p), false)]);
  await fleet.call(import.meta.url, connectPairs, [specs]);
  const t = await timed(work);
  const got = await fleet.do(frames);
  await fleet.do(close);
  const check = (p: Placed, i: number) =>
    checkFrames(p.owner.base, p.user, p.conversationId, p.afterSeq, got.slice(2 * i, 2 * i + 2));
  const events = (await Promise.all(set.map(check))).reduce((n, s) => n + s.length, 0);
  set.forEach((p, i) => (p.afterSeq = got[2 * i]!.at(-1)?.[0] ?? p.afterSeq));
  return { t, events, use: [t] as Array<Timed<unknown>>, summary: `${fmt.int(events)} events in ${fmt.ms(t.ms)} ms` };
}
const lat = (ms: ArrayLike<number>) => `p50 ${fmt.ms(percentile(ms, 50))} ms, p99 ${fmt.ms(percentile(ms, 99))} ms`;
const cpuOf = (t: Timed<unknown>, p: string) =>
  Object.entries(t.cpu).reduce((n, [k, v]) => (k.startsWith(p) ? n + v : n), 0);
/** CPU per stored event (µs, median over runs) of the processes named `of…`. */
const cpu = (runs: Array<{ events: number; t: Timed<unknown> }>, of: string) =>
  fmt.int(1000 * median(runs.map((r) => cpuOf(r.t, of) / r.events)));

export const cluster: Scenario = {
  name: 'cluster',
  setup: `a 3-node NATS cluster (three nats-servers on loopback, temporary stores) and three \`tether serve\` (node-a, b, c; ${SETTINGS}: the per-connection frame limit raised, so as not to pace (l)'s senders; default lease, local runtimes, scripted agent, one token and user per conversation). Each conversation is created through the node that is to own it (checked: in its memory), its clients start after its start-up; the agent thinks ten minutes after a conversation's first message, so each further user action is stored and delivered as one event. Clients in the fleet process, each conversation's sender on its owner.`,
  load: "(k) 30 conversations, a third owned by each node, a watcher on the next node (a → b → c → a); one untimed first action each (REST, through the owner); then open loop from the fleet: action m of conversation c due at (m × 30 + c) / 150 s and sent when due; latency from due to its event frame at each client; 40 actions each, 1 run. (l) 60 conversations per side, each sender keeping 8 actions in flight, 100 per run, done when every watcher has its sender's last event: 3 nodes (a third created through each, the watcher on the next node) vs 1 node (all through node a, both clients on a, b and c up and idle); a repetition runs both sides on the same conversations; 1 warm-up and 3 repetitions, median per side.",
  baseline: '(k) the same action at the sender on its owner; (l) the same load, all on node a.',
  checks:
    "each client checks every user message it gets is its conversation's next one (by content); after each run every client's frames are compared with the log read over REST through the owner (same seqs, order and JSON).",
  quick: '(k) 15 conversations × 15 actions; (l) 30 conversations per side × 30 actions, 1 repetition, no warm-up.',
  async run(ctx) {
    const [kn, km, ln, lm] = ctx.quick ? [15, 15, 30, 30] : [30, 40, 60, 100];
    const cl = await startCluster({ label: 'cluster', users: kn + 2 * ln, env: ENV });
    const [fleet, [a], toNext] = [new Fleet(), cl.nodes as [TetherNode], (p: Placed) => next(cl, p.owner)];
    try {
      const spread = (n: number, one = false) => Array.from({ length: n }, (_, i) => cl.nodes[one ? 0 : i % 3]!);
      const kSet = await place(cl, spread(kn), 0);
      const [lSpread, lOne] = [await place(cl, spread(ln), kn), await place(cl, spread(ln, true), kn + ln)];
      await firstActions(kSet);
      const kRun = async () => {
        const r = await clients(fleet, kSet, toNext, () => fleet.call(import.meta.url, pacedPairs, [km, 150]));
        return { ...r, summary: `${r.summary} (${lat(r.t.value[0])} to the owner, ${lat(r.t.value[1])} elsewhere)` };
      };
      const [owner, other] = (await repeat(ctx, '(k)', { warmups: 0, runs: 1 }, kRun))[0]!.t.value;
      const side = (set: Placed[], on: typeof toNext) => clients(fleet, set, on, () => fleet.do(run, lm, 8, false));
      const lRun = async () => {
        const [three, one] = [await side(lSpread, toNext), await side(lOne, () => a)];
        return { three, one, use: [three.t, one.t], summary: `3 nodes ${three.summary}, 1 node ${one.summary}` };
      };
      const lr = await repeat(ctx, '(l)', reps(ctx, { warmups: 0, runs: 1 }, { warmups: 1, runs: 3 }), lRun);
      const replicas = (await (await jetstreamManager(cl.nc)).streams.info(DEFAULT_STREAM)).config.num_replicas;
      const [threes, ones] = [lr.map((x) => x.three), lr.map((x) => x.one)];
      const use = (r: typeof ones) =>
        `nodes ${cpu(r, 'node-')}, nats-servers ${cpu(r, 'nats ')}, fleet ${cpu(r, 'fleet')}`;
      const idle = ones.map((x) => fmt.int(cpuOf(x.t, 'node-b') + cpuOf(x.t, 'node-c'))).join(', ');
      const extra = lat(other.map((v, i) => v - owner[i]!));
      ctx.note(`(k) per action, its arrival at the other node minus at the sender on the owner: ${extra}.`);
      const lNote = `(l) CPU per stored event (median, µs): 3 nodes: ${use(threes)}; 1 node: ${use(ones)}. b and c used ${idle} ms of CPU together in the 1-node runs (heartbeats only). Event stream R${replicas}.`;
      ctx.note(lNote);
      const p99Ratio = fmt.ratio(percentile(other, 99) / percentile(owner, 99));
      const [three, one] = [threes, ones].map((r) => median(r.map((x) => (x.events / x.t.value) * 1000))) as [
        number,
        number,
      ];
      return [
        {
          id: 'k',
          what: `delivery on a non-owner node: from a user action due (ws, open loop, 150 actions/s in all over ${kn} conversations, ${km} each; the sender on the owner) to its event frame at a ws client on another node, vs at the sender on the owner; 3 \`tether serve\` on a 3-node NATS cluster, event stream R${replicas}; ratio of the p50s (the p99s' ratio in the Tether column)`,
          tether: { value: percentile(other, 50), text: `${lat(other)} (p99 ratio ${p99Ratio})` },
          baseline: { value: percentile(owner, 50), text: `${lat(owner)} on the owner` },
        },
        {
          id: 'l',
          what: `append and deliver, 3 Tether nodes vs 1: ${ln} conversations, a third owned by each node, the sender on the owner keeping 8 actions in flight, a watcher on the next node; vs the same load all on node a (b and c idle); the same 3-node NATS cluster (event stream R${replicas}) and cores, stored events/s (median of ${lr.length}). Not a scale-out figure: nodes and nats-servers share the cores; 1 would be free, below 1 is the price of routing and fan-out`,
          tether: per(three, 'events/s on 3 nodes'),
          baseline: per(one, 'events/s on 1 node'),
        },
      ];
    } finally {
      await fleet.stop();
      await cl.stop();
    }
  },
};
