// (j) Failover: kill -9 of the node owning a set of conversations, in a cluster of three `tether serve`; from the
// kill to each one's answer through a surviving node, against the lease and the same answer with no kill.
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import WebSocket from 'ws';
import { protocolClient, type ProtocolClient } from '../../src/client/index.ts';
import { kvClusterStore } from '../../src/store/index.ts';
import { startCluster, type TetherCluster, type TetherNode } from '../harness/cluster.ts';
import { Fleet } from '../harness/fleet.ts';
import { rest, restEvents } from '../harness/host.ts';
import { describeUse, fmt, percentile, sleep, timed, until, within } from '../harness/measure.ts';
import type { Scenario } from '../harness/scenario.ts';

const LEASE_MS = 5_000; // TETHER_LEASE_MS's default
type Wire = { type: string; source: string; data?: { state?: string; content?: string } };
const answers = (content: string) => (e: Wire) =>
  e.source === 'agent' && e.type === 'message' && !!e.data?.content?.startsWith(`You said: "${content}".`);

// Fleet side: one ws client per conversation (the round before's closed), noting when (wall clock) each event came.
const watched: Array<ProtocolClient<WebSocket>> = [];
const seen = new Map<string, Array<{ at: number; seq: number; e: Wire }>>();
export async function watch(specs: Array<[ws: string, token: string, id: string]>): Promise<void> {
  watched.splice(0).forEach((c) => c.close());
  const one = ([ws, token, id]: [string, string, string]) =>
    new Promise<void>((resolve, reject) => {
      const [url, got] = [`${ws}/ws?token=${token}&conversation_id=${id}`, seen.set(id, []).get(id)!];
      const event = (f: { seq: number; event: object }) => got.push({ at: Date.now(), seq: f.seq, e: f.event as Wire });
      const fail = () => reject(new Error(`the ws client of ${id} failed`));
      const handlers = { sync: () => resolve(), event, error: fail, invalid: fail, close: fail };
      watched.push(protocolClient({ WebSocket, url, reconnect: false, handlers }));
    });
  await Promise.all(specs.map(one));
}
/** When the answer to `content` reached the client, once `awaiting_user_input` followed it. */
export function arrival(id: string, content: string) {
  const find = async (got = seen.get(id)!, a = got.find((s) => answers(content)(s.e))) =>
    a && got.some((s) => s.seq > a.seq && s.e.data?.state === 'awaiting_user_input') ? a : undefined;
  return until(`${id}: the answer to "${content}" at the ws client`, find, 6 * LEASE_MS, 5);
}

/** A message (a client_id: stored once) through `bases` in turn, again after any failure, until accepted. */
async function accepted(bases: string[], token: string, id: string, content: string, attemptMs: number) {
  const [by, body] = [Date.now() + 6 * LEASE_MS, { action: { type: 'message', content }, client_id: content }];
  for (let attempt = 1; ; attempt++) {
    const post = rest(bases[(attempt - 1) % bases.length]!, token, `/api/conversations/${id}/actions`, body);
    const failed = (err: Error) => (Date.now() > by ? Promise.reject(err) : sleep(100));
    if (await within(attemptMs, 'POST', post).then(() => true, failed)) return { at: Date.now(), attempts: attempt };
  }
}

/** One round: `n` conversations created through a (it runs them) and, once each awaits input, watched on b or c; a message to each through that node; every other one set running a command; kill -9 of a; each one's next message through b or c until answered. */
async function round(cl: TetherCluster, fleet: Fleet, r: number, n: number, last: boolean) {
  const [a, b, c] = cl.nodes as [TetherNode, TetherNode, TetherNode];
  const made = async (token: string, i: number) => {
    const { conversation_id: id } = await rest<{ conversation_id: string }>(a.base, token, '/api/conversations', {});
    const state = async () => (await rest<{ state: string }>(a.base, token, `/api/conversations/${id}`)).state;
    await until(`${id} start-up`, async () => ((await state()) === 'awaiting_user_input' ? true : undefined));
    return { id, i, token, via: i % 2 ? c : b, other: i % 2 ? b : c, mid: i % 2 === 1 };
  };
  const s = await Promise.all(cl.tokens.slice(0, n).map(made));
  await fleet.call(import.meta.url, watch, [s.map((x): [string, string, string] => [x.via.ws, x.token, x.id])]);
  const answered = (x: (typeof s)[0], content: string) => fleet.call(import.meta.url, arrival, [x.id, content]);
  const baseline = async (x: (typeof s)[0], content = `baseline ${r} ${x.i}`, sent = Date.now()) =>
    accepted([x.via.base], x.token, x.id, content, 10_000).then(async () => (await answered(x, content)).at - sent);
  const baselineMs = await Promise.all(s.map((x) => baseline(x)));
  for (const x of s.filter((x) => x.mid)) {
    await accepted([a.base], x.token, x.id, '!touch failover-started && sleep 600', 10_000);
    const mark = () => access(join(cl.workspaces, x.id, 'failover-started')).then(() => true);
    await until(`${x.id}: the command started`, () => mark().catch(() => undefined));
  }
  const [heartbeats, killedAt] = [await kvClusterStore(cl.nc, { leaseMs: LEASE_MS }), Date.now()];
  const t = await timed(async () => {
    const killed = a.kill();
    const lapsed = async () => ((await heartbeats.alive(a.name)) ? undefined : Date.now() - killedAt);
    const gone = until('the heartbeat of node-a gone', lapsed, 6 * LEASE_MS, 10);
    const after = async (x: (typeof s)[0], content = `failover ${r} ${x.i}`) => {
      const ok = await accepted([x.via.base, x.other.base], x.token, x.id, content, 4 * LEASE_MS);
      return { content, ok, answer: await answered(x, content) };
    };
    const all = await Promise.all(s.map((x) => after(x)));
    await killed;
    return { all, goneMs: await gone };
  });
  await sleep(200); // the last rehydrations' log lines may still be in the pipe
  const lines = [b, c].flatMap((o) => o.log.filter((l) => l.at >= killedAt));
  const first = (about: string, what: string) =>
    Math.min(...lines.filter((l) => l.text.includes(what) && l.text.includes(about)).map((l) => l.at - killedAt));
  const sample = async (x: (typeof s)[0], i: number) => {
    const { content, ok, answer } = t.value.all[i]!;
    const events = (await restEvents(x.via.base, x.token, x.id, 0)).map((e) => e.event as Wire);
    const [stored, replies] = [events.filter((e) => e.data?.content === content), events.filter(answers(content))];
    if (stored.length !== 1 || replies.length !== 1) throw new Error(`${x.id}: "${content}" not stored, answered 1×`);
    const rehydrated = first(x.id, '"session rehydrated"');
    return { mid: x.mid, baselineMs: baselineMs[i]!, okMs: ok.at - killedAt, ms: answer.at - killedAt, ok, rehydrated };
  };
  const samples = await Promise.all(s.map(sample));
  // b and c list the nodes every lease/4: they must see a back before the next kill.
  if (!last) await a.start().then(() => sleep(LEASE_MS / 2));
  const [after, noKill] = [samples.map((v) => fmt.int(v.ms)), samples.map((v) => fmt.ms(v.baselineMs))];
  const log = `kill ${r}: answers (ms; idle, running a command, alternately) ${after.join(', ')}; no kill ${noKill.join(', ')}; ${describeUse(t)}`;
  return { samples, goneMs: t.value.goneMs, nodesGoneMs: first(a.name, '"nodes gone"'), log };
}

type Round = Awaited<ReturnType<typeof round>>;
const ms = (v: number[], p = 99) => `${fmt.int(percentile(v, p))} ms`;
const spread = (v: number[], w = v.filter(Number.isFinite)) => (w.length ? `p50 ${ms(w, 50)}, max ${ms(w, 100)}` : '–');

/** Where the time went, from the kill (the bench's reads and b's and c's info logs). */
function split(rounds: Round[]): string {
  const all = rounds.flatMap((x) => x.samples);
  const each = (f: (x: Round) => number) => rounds.map((x) => `${fmt.int(f(x))} ms`).join(', ');
  const answer = (mid: boolean) => spread(all.filter((v) => v.mid === mid).map((v) => v.ms));
  const [rehydrated, okMs] = [spread(all.map((v) => v.rehydrated)), spread(all.map((v) => v.okMs))];
  const retried = all.filter((v) => v.ok.attempts > 1).length;
  return `Where the time goes, from the kill: a's heartbeat found gone (read every 10 ms) at ${each((x) => x.goneMs)} (renewed every lease/4: it ages out 0.75 to 1 lease after the kill); the first \`nodes gone\` on b or c at ${each((x) => x.nodesGoneMs)}; \`session rehydrated\` ${rehydrated}; the message accepted (202) ${okMs}; its answer at the ws client: idle conversations ${answer(false)}, those running a command ${answer(true)}. ${retried} of ${all.length} messages needed more than one POST. A kill's conversations share its heartbeat's age: they move together.`;
}

export const failover: Scenario = {
  name: 'failover',
  setup: `a 3-node NATS cluster (three nats-servers on loopback, temporary stores) and three \`tether serve\` (node-a, b, c: one data dir each, TETHER_LEASE_MS=${LEASE_MS}, one shared workspaces folder, local runtimes, scripted agent, default limits and replicas, one token and user per conversation); ws clients in the fleet process.`,
  load: "a round: the conversations created through node a (it owns them); once each awaits input (read through a), a ws client on b or c (alternately) on its whole history; a message through that node (the no-kill baseline: from the POST to the answer at the client); every other conversation set running `sleep 600` through a (waited until started); kill -9 of a, and at once each conversation's next message POSTed with a client_id through b or c in turn, again after any error, non-202 or 4 leases, until accepted; a sample is from the kill to its answer at the ws client. Before the next round a is started again (same id, data dir) and given half a lease. 3 rounds of 30 conversations.",
  baseline: 'the lease (the time the cluster waits before it may take over); the same answer with no kill.',
  checks: 'each message read back through b or c after its round: stored once, answered once (the agent quotes it).',
  quick: '1 round of 10 conversations; the same lease.',
  async run(ctx) {
    const [kills, n] = ctx.quick ? [1, 10] : [3, 30];
    const env = { TETHER_LEASE_MS: `${LEASE_MS}`, TETHER_LOG_LEVEL: 'info' };
    const [cl, fleet] = [await startCluster({ label: 'failover', users: n, env }), new Fleet()];
    try {
      const rounds: Round[] = [];
      for (let r = 1; r <= kills; r++) rounds.push(await round(cl, fleet, r, n, r === kills));
      rounds.forEach((x) => ctx.log(x.log));
      ctx.note(split(rounds));
      const all = rounds.flatMap((x) => x.samples);
      const [answer, noKill] = [all.map((v) => v.ms), all.map((v) => v.baselineMs)];
      const [p99, once] = [percentile(answer, 99), `${all.length} of ${all.length} stored and answered once`];
      const what = `failover: kill -9 of the node owning ${n} conversations (half idle, half running a command), 3 \`tether serve\` on a 3-node NATS cluster, lease ${fmt.int(LEASE_MS)} ms; from the kill to each one's answer to a message through a surviving node (resent, same client_id, until accepted), ${kills} kill(s), ${all.length} conversations, p99 (p50) vs the lease; beside it the same with no kill`;
      const tether = { value: p99, text: `${ms(answer)} (p50 ${ms(answer, 50)}); ${once}` };
      const baseline = {
        value: LEASE_MS,
        text: `lease ${ms([LEASE_MS])}; no kill: ${ms(noKill)} (p50 ${ms(noKill, 50)})`,
      };
      const target = { op: '≤', value: 1.4, say: '× lease, each message stored and answered once' } as const;
      return [{ id: 'j', what, tether, baseline, ratio: p99 / LEASE_MS, target }];
    } finally {
      await fleet.stop();
      await cl.stop();
    }
  },
};
