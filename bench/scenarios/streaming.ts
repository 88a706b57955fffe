// (o to o6) Token streaming: a reply's first delta at ws clients of the owner and of another node after the LLM's
// first token; a client back mid-reply; host CPU per delta under load vs a bare ws server; every stream whole.
// Exports run in the fleet, the fake LLM's process or the bare ws server's, as named.
import type { AddressInfo } from 'node:net';
import pLimit from 'p-limit';
import WebSocket, { WebSocketServer } from 'ws';
import type { DeltaFrame } from '../../protocol/index.ts';
import { startFakeLlmServer, streamed, type FakeLlmServer } from '../../test/support/fakeLlmServer.ts';
import { startCluster } from '../harness/cluster.ts';
import { close, deltas, frames, plug, Fleet, TetherMember } from '../harness/fleet.ts';
import type { ClientSpec, Delta, Frame } from '../harness/fleet.ts';
import { checkFrames, startedConversation, TetherHost } from '../harness/host.ts';
import { fmt, median, percentile, sleep, timed, track, untrack, until, type Timed } from '../harness/measure.ts';
import { Proc } from '../harness/proc.ts';
import { msFigure, repeat, reps, type Ctx, type Row, type Scenario } from '../harness/scenario.ts';

const [GAP_MS, LLM_DELTAS, DELTA_MS, SLOW_DELTA_MS, DROP_AFTER, CLIENTS] = [50, 6, 5, 30, 4, 3];
const [ME, now] = [import.meta.url, () => performance.timeOrigin + performance.now()];

// In the fake LLM's process: request n is answered at once, then `r<n> word0 word1 …`, a token every GAP_MS.
let fake: FakeLlmServer | undefined;
export async function startFake(): Promise<string> {
  const [words, next] = [Array.from({ length: LLM_DELTAS - 1 }, (_, i) => ` word${i}`), { n: 0 }];
  fake = await startFakeLlmServer({
    reply: () => streamed([`r${next.n++}`, ...words], { gapMs: GAP_MS, leadMs: GAP_MS }),
  });
  return fake.baseUrl;
}
export const firstTokens = async () => fake!.requests.map((r) => r.firstTokenAt ?? Number.NaN);

// In the bare ws server's process: a client joins room r by its path `/r`; `broadcast` sends each room its frames.
const rooms = new Map<string, WebSocket[]>();
export async function startBareRooms(): Promise<number> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  wss.on('connection', (ws, req) => rooms.set(req.url!, [...(rooms.get(req.url!) ?? []), ws.on('error', () => {})]));
  await new Promise((resolve) => wss.once('listening', resolve));
  return (wss.address() as AddressInfo).port;
}
export async function broadcast(all: string[][], gapMs: number): Promise<void> {
  const room = async (frames: string[], r: number) => {
    for (const [i, f] of frames.entries()) {
      if (i) await sleep(gapMs);
      rooms.get(`/${r}`)!.forEach((ws) => ws.send(f));
    }
  };
  await Promise.all(all.map(room));
  rooms.forEach((sockets) => sockets.forEach((ws) => ws.close()));
  rooms.clear();
}

// In the fleet: Tether clients grouped by conversation, the sender first; bare ws clients, CLIENTS per room.
let [mine, bare] = [[] as TetherMember[][], [] as string[][]];
const member = (spec: ClientSpec) =>
  new Promise<TetherMember>((ok, no) => {
    const m: TetherMember = new TetherMember(spec, (err) => (err ? no(err) : ok(m)));
  });
export const connectGroups = async (specs: ClientSpec[][]) =>
  plug((mine = await Promise.all(specs.map((g) => Promise.all(g.map(member))))));
/** The sender's next message; resolves once the agent awaits input after it and every client of the group has all. */
async function turn(group: TetherMember[]): Promise<void> {
  const [s, k] = [group[0]!, group[0]!.echoed];
  await new Promise<void>((resolve, reject) => {
    s.reached(Number.MAX_SAFE_INTEGER).catch(reject);
    s.onFrame = () =>
      void (s.echoed > k && s.settled.seq > s.lastUserSeq && s.settled.state === 'awaiting_user_input' && resolve());
    s.send(k);
  });
  s.onFrame = null;
  await Promise.all(group.map((m) => m.reached(s.position)));
}
/** `replies` turns per conversation: every conversation at once (`together`), or one turn at a time in all. */
export async function turns(replies: number, together: boolean): Promise<void> {
  const inTurn = async (gs: TetherMember[][]) => {
    for (let k = 0; k < replies * gs.length; k++) await turn(gs[k % gs.length]!);
  };
  await Promise.all(together ? mine.map((g) => inTurn([g])) : [inTurn(mine)]);
}
/** A watcher sends; a client is dropped (`terminate()`) after DROP_AFTER deltas and is back at once with its cursor:
 * ms from its new socket to its `sync`, and to having the deltas the watcher had at that moment. */
export async function dropMidReply(spec: ClientSpec) {
  const [watcher, client] = await Promise.all([member(spec), member(spec)]);
  const answered = turn([watcher]);
  await until('deltas before the drop', async () => client.deltas.length >= DROP_AFTER || undefined, 10_000, 1);
  client.client.socket?.terminate();
  const [cursor, t0] = [client.position, now()];
  const had = Math.max(client.deltas.length, watcher.deltas.filter(([e]) => e > 0).length);
  const back = await member({ ...spec, afterSeq: cursor });
  const syncMs = now() - t0;
  await until('caught up', async () => back.deltas.length >= had || undefined, 10_000, 1);
  await answered.then(() => back.reached(watcher.position));
  [watcher, back].forEach((m) => m.close());
  const got = (m: TetherMember): Got => [m.frames, m.deltas];
  return { cursor, had, ms: back.deltas[had - 1]![2] - t0, syncMs, w: got(watcher), b: got(back) };
}
export async function bareJoin(url: string, rooms: number): Promise<void> {
  const join = (r: number) =>
    new Promise<string[]>((open, no) => {
      const [got, ws] = [[] as string[], new WebSocket(`${url}/${r}`, { perMessageDeflate: false })];
      ws.on('open', () => open(got))
        .on('error', no)
        .on('message', (data) => got.push((data as Buffer).toString()));
    });
  bare = await Promise.all(Array.from({ length: rooms * CLIENTS }, (_, i) => join(Math.floor(i / CLIENTS))));
}
/** Once every bare client has as many frames as its room was sent: each must be what was sent, in order. */
export async function bareReceived(sent: string[][]): Promise<void> {
  const room = (i: number) => sent[Math.floor(i / CLIENTS)]!;
  await until('bare ws frames', async () => bare.every((g, i) => g.length >= room(i).length) || undefined, 60_000, 1);
  const wrong = bare.findIndex((g, i) => g.join('\n') !== room(i).join('\n'));
  if (wrong >= 0) throw new Error(`bare ws client ${wrong}: its frames are not what its room was sent`);
}

type Got = [Frame[], Delta[]];
type Answer = { source: string; data?: { item_id?: string; attempt?: number; deltas?: number; content?: string } };
// Every connection of the scenario (warm-ups included): clean when each stored reply came whole and nothing else.
const tally = { connections: 0, clean: 0, replies: 0, whole: 0, stale: 0, problems: [] as string[] };
/** One client: each stored answer with an item had, before it and none after, its attempt's deltas, indexes 0, 1, 2…
 * once each, as many as it says, joined equal to its content; any other delta is a problem (stale when it came before
 * any event: a reply stored before the client's cursor). Returns the deltas of whole replies. */
function checkDeltas(who: string, [events, got]: Got): Delta[] {
  const ds = got.map((raw) => ({ raw, ...(JSON.parse(raw[1]) as DeltaFrame) }));
  const [ok, items, problems] = [new Set<Delta>(), new Set<string>(), [] as string[]];
  const idx = (xs: Array<{ attempt?: number; index: number }>) =>
    xs.map((d) => `${d.attempt}.${d.index}`).join(' ') || 'none';
  events.forEach(([seq, json], at) => {
    const { source, data } = JSON.parse(json) as Answer;
    if (source !== 'agent' || data?.item_id === undefined) return;
    const of = ds.filter((d) => d.item_id === data.item_id);
    items.add(data.item_id);
    const [early, late] = [of.filter((d) => d.raw[0] <= at), of.filter((d) => d.raw[0] > at)];
    const want = Array.from({ length: data.deltas ?? 0 }, (_, i) => ({ attempt: data.attempt, index: i }));
    const whole = !late.length && idx(early) === idx(want) && early.map((d) => d.text).join('') === data.content;
    [tally.replies, tally.whole] = [tally.replies + 1, tally.whole + +whole];
    if (whole) of.forEach((d) => ok.add(d.raw));
    else problems.push(`reply at seq ${seq} (${data.deltas} deltas): ${idx(early)} before it, ${idx(late)} after`);
  });
  const stray = ds.filter((d) => !items.has(d.item_id));
  const stale = stray.every((d) => d.raw[0] === 0);
  if (stray.length) problems.push(`deltas ${idx(stray)} of no stored reply, ${stale ? 'before any event' : 'late'}`);
  [tally.connections, tally.clean] = [tally.connections + 1, tally.clean + +!problems.length];
  tally.stale += stale ? stray.length : 0;
  tally.problems.push(...problems.map((p) => `${who}: ${p}`));
  return got.filter((d) => ok.has(d));
}

type Conv = Omit<ClientSpec, 'ws' | 'sends'>;
/** n conversations of users `<label>-<i>` (i from `from`), created through `base` and started; 8 at a time. */
const conversations = (base: string, label: string, n: number, from = 0, limit = pLimit(8)) =>
  Promise.all(
    Array.from({ length: n }, (_, k, index = from + k, user = `${label}-${index}`) =>
      limit(async (): Promise<Conv> => {
        const { id, seq } = await startedConversation(base, user);
        return { user, conversationId: id, afterSeq: seq, index };
      }),
    ),
  );
/** Times `work` on the fleet's groups (`per` clients each); checks every client's events against the log and its
 * deltas; moves the cursors on. Returns each client's deltas of whole replies. */
async function checked(fleet: Fleet, base: string, convs: Conv[], per: number, work: () => Promise<unknown>) {
  const t = await timed(work);
  const [got, ds] = [await fleet.do(frames), await fleet.do(deltas)];
  await fleet.do(close);
  for (const [g, c] of convs.entries()) {
    await checkFrames(base, c.user, c.conversationId, c.afterSeq, got.slice(g * per, (g + 1) * per));
    c.afterSeq = got[g * per]!.at(-1)?.[0] ?? c.afterSeq;
  }
  const who = (i: number) => `${convs[Math.floor(i / per)]!.conversationId} client ${i % per}`;
  return { t, ds: got.map((f, i) => checkDeltas(who(i), [f, ds[i]!])) };
}
const lat = (ms: number[]) => `p50 ${fmt.ms(percentile(ms, 50))} ms, p99 ${fmt.ms(percentile(ms, 99))} ms`;

/** (o to o3) Replies one at a time over C conversations owned by node-a, a client on each node. */
async function firstDelta(ctx: Ctx, fleet: Fleet): Promise<Row[]> {
  const [N, C, WARM] = ctx.quick ? [20, 4, 8] : [100, 5, 20];
  const llm = new Proc('fake-llm');
  track('fake-llm', llm.pid);
  const env = { TETHER_LLM_API_KEY: 'x', TETHER_LLM_MODEL: 'fake-model', TETHER_LOG_LEVEL: 'warn' };
  const url = await llm.call(ME, startFake, []);
  const cl = await startCluster({ label: 'stream', users: C, nodes: 2, env: { ...env, TETHER_LLM_BASE_URL: url } });
  try {
    const [[a, b], convs] = [cl.nodes, await conversations(cl.nodes[0]!.base, 'stream', C)];
    const r = reps(ctx, { warmups: 1, runs: 1 }, { warmups: 1, runs: 1 });
    const runs = await repeat(ctx, '(o to o3)', r, async (i) => {
      const n = i < r.warmups ? WARM : N;
      const pair = (c: Conv) => [true, false].map((sends) => ({ ...c, ws: (sends ? a : b)!.ws, sends }));
      await fleet.call(ME, connectGroups, [convs.map(pair)]);
      const { t, ds } = await checked(fleet, a!.base, convs, 2, () => fleet.call(ME, turns, [n / C, false]));
      const [firsts, ms] = [await llm.call(ME, firstTokens, []), [[], []] as [number[], number[]]];
      for (const [c, got] of ds.entries())
        for (const [, json, at] of got) {
          const f = JSON.parse(json) as DeltaFrame;
          if (f.index === 0) ms[c % 2]!.push(at - firsts[parseInt(f.text.slice(1), 10)]!);
        }
      return { ms, use: [t], summary: `${n} replies: owner ${lat(ms[0])}; other node ${lat(ms[1])}` };
    });
    return (['o', 'o1', 'o2', 'o3'] as const).map((id, k): Row => ({
      id,
      what: `time to first delta p${k % 2 ? 99 : 50}: from the LLM's first token (an OpenAI-compatible fake: the response at once, then a token every ${GAP_MS} ms) to delta index 0 at a ws client of ${k < 2 ? 'the owner' : 'another node'}, ${N} replies one at a time, 2 \`tether serve\` on a 3-node NATS cluster; vs the token gap`,
      tether: msFigure(median(runs.map((x) => percentile(x.ms[k >> 1]!, k % 2 ? 99 : 50)))),
      baseline: msFigure(GAP_MS, ' (token gap)'),
      ...(k < 2 && { target: { op: '≤', value: 0.1 } }),
    }));
  } finally {
    await cl.stop();
    untrack('fake-llm');
    await llm.stop();
  }
}

/** (o4) A client dropped mid-reply and back with its cursor, on a host whose scripted agent streams slowly. */
async function resumeMid(ctx: Ctx, fleet: Fleet): Promise<Row[]> {
  const host = await TetherHost.start(ctx, { tag: ctx.tag('o4'), deltaMs: SLOW_DELTA_MS });
  try {
    let k = 0;
    const runs = await repeat(ctx, '(o4)', reps(ctx, { warmups: 0, runs: 2 }, { warmups: 2, runs: 7 }), async () => {
      const [c] = (await conversations(host.base, 'resume', 1, k++)) as [Conv];
      const t = await timed(() => fleet.call(ME, dropMidReply, [{ ...c, ws: host.ws, sends: true }]));
      const x = t.value;
      const of = (after: number, got: Got) => checkFrames(host.base, c.user, c.conversationId, after, [got[0]]);
      await Promise.all([of(c.afterSeq, x.w), of(x.cursor, x.b)]);
      const all = checkDeltas(`${c.conversationId} watcher`, x.w).length;
      const again = checkDeltas(`${c.conversationId} back`, x.b).length;
      if (x.had >= all) throw new Error(`(o4) not mid-reply: ${x.had} of ${all} deltas before the resume`);
      const summary = `back after ${DROP_AFTER} deltas: sync in ${fmt.ms(x.syncMs)} ms, the ${x.had} so far in ${fmt.ms(x.ms)} ms; ${again} of ${all} deltas of a whole reply`;
      return { ...x, use: [t], summary };
    });
    const what = `resume mid-reply: a ws client dropped after ${DROP_AFTER} deltas of a reply (scripted agent, a delta every ${SLOW_DELTA_MS} ms) reconnects with its cursor; from its new socket to having every delta so far again from index 0, median of ${runs.length}; vs the same from its new socket to its \`sync\``;
    const [ms, sync] = [median(runs.map((x) => x.ms)), median(runs.map((x) => x.syncMs))];
    return [{ id: 'o4', what, tether: msFigure(ms), baseline: msFigure(sync, ' (sync)') }];
  } finally {
    await host.stop(ctx.nc);
  }
}

/** (o5) M conversations × CLIENTS clients streaming at once, vs a bare ws server sending the same frames at the pace. */
async function load(ctx: Ctx, fleet: Fleet): Promise<Row[]> {
  const [M, R] = ctx.quick ? [20, 2] : [100, 3];
  const [host, server] = [await TetherHost.start(ctx, { tag: ctx.tag('o5'), deltaMs: DELTA_MS }), new Proc('bare-ws')];
  track('bare-ws', server.pid);
  try {
    const url = `ws://127.0.0.1:${await server.call(ME, startBareRooms, [])}`;
    const convs = await conversations(host.base, 'load', M);
    const runs = await repeat(ctx, '(o5)', reps(ctx, { warmups: 0, runs: 1 }, { warmups: 1, runs: 3 }), async () => {
      const group = (c: Conv) => Array.from({ length: CLIENTS }, (_, j) => ({ ...c, ws: host.ws, sends: j === 0 }));
      await fleet.call(ME, connectGroups, [convs.map(group)]);
      const { t, ds } = await checked(fleet, host.base, convs, CLIENTS, () => fleet.call(ME, turns, [R, true]));
      const [sent, n] = [convs.map((_, g) => ds[g * CLIENTS]!.map(([, json]) => json)), ds.flat().length];
      await fleet.call(ME, bareJoin, [url, M]);
      const b = await timed(() =>
        Promise.all([server.call(ME, broadcast, [sent, DELTA_MS]), fleet.call(ME, bareReceived, [sent])]),
      );
      const cpu = (x: Timed<unknown>, p: string) => ((x.cpu[p] ?? 0) * 1000) / n; // µs per frame delivered
      const [rate, bareRate] = [(n / t.ms) * 1000, (n / b.ms) * 1000];
      const [us, nats, bareUs] = [cpu(t, 'host'), cpu(t, 'nats-server'), cpu(b, 'bare-ws')];
      const summary = `${fmt.int(n)} deltas delivered: Tether ${fmt.int(rate)}/s, host ${us.toFixed(1)} µs + nats-server ${nats.toFixed(1)} µs each; bare ws ${fmt.int(bareRate)}/s, ${bareUs.toFixed(1)} µs each`;
      return { rate, bareRate, us, nats, bareUs, use: [t, b], summary };
    });
    const m = (k: 'rate' | 'bareRate' | 'us' | 'nats' | 'bareUs') => median(runs.map((x) => x[k]));
    const what = `CPU per delta delivered to a client: ${M} conversations streaming at once × ${CLIENTS} ws clients (scripted agent, a delta every ${DELTA_MS} ms, ${R} replies each in turn), the host process vs a bare ws server sending the same frames to the same clients, each room's ${DELTA_MS} ms apart, per frame (median)`;
    const text = (us: number, rate: number, unit: string) => `${us.toFixed(1)} µs at ${fmt.int(rate)} ${unit}/s`;
    const [us, nats] = [m('us'), m('nats').toFixed(1)];
    const tether = { value: us, text: `${text(us, m('rate'), 'deltas')} + nats-server ${nats} µs` };
    const baseline = { value: m('bareUs'), text: text(m('bareUs'), m('bareRate'), 'frames') };
    return [{ id: 'o5', what, tether, baseline }];
  } finally {
    await host.stop(ctx.nc);
    untrack('bare-ws');
    await server.stop();
  }
}

export const streaming: Scenario = {
  name: 'streaming',
  setup: `(o to o3) a fake OpenAI-compatible LLM server (test/support/fakeLlmServer.ts) in a process of its own, answering request n as OpenAI's API does, the response and its role chunk at once and the first token a gap later (the model's time to first token), then a stream of ${LLM_DELTAS} text deltas, \`r<n>\` first, a token every ${GAP_MS} ms (when the first token came with the response headers, the time measured also held the HTTP client's set-up of the response: about 2.5 ms more at p50 in the runs of 2026-11-27); two \`tether serve\` (node-a, node-b, their LLM agent on the fake) on a 3-node NATS cluster; 5 conversations created through node-a, their owner, each with a client on node-a (it sends) and one on node-b. (o4) a Tether host whose scripted agent streams each reply a few words per delta, ${SLOW_DELTA_MS} ms apart; per run a new conversation, a watcher (it sends) and a client. (o5) a Tether host whose scripted agent streams a delta every ${DELTA_MS} ms, 100 conversations × ${CLIENTS} clients; a bare \`ws\` server with no logic in a process of its own, a room per conversation. Every client in the fleet process (Tether's: the protocol client).`,
  load: `(o to o3) 100 user messages one at a time, turn by turn over the conversations, each sent once the reply to the one before is stored and at both clients; per reply and client, the receive time of delta index 0 minus the fake's \`firstTokenAt\` of its request (both epoch ms as \`performance.timeOrigin + performance.now()\` in their own process); p50 and p99 by nearest rank; 1 warm-up of 20 replies, 1 run. (o4) the client is dropped with \`terminate()\` after its ${DROP_AFTER}th delta and reconnects at once after its last event; timed in the fleet from its new socket to the delta of the last index the watcher had at that moment (every delta so far, from index 0 again), and to its \`sync\`; 2 warm-ups and 7 runs, median. (o5) every sender sends 3 messages, each once the reply to the one before is with its ${CLIENTS} clients, all conversations at once; the host's CPU over the run (\`/proc\`) over the deltas delivered (every client's); then the bare server sends each room the same delta frames (the JSON its first client got), ${DELTA_MS} ms apart as the agent does, all rooms at once, until every client has them; 1 warm-up and 3 runs, median.`,
  baseline: `(o to o3) the fake's token gap: the ratio is the share of a token's time the way from the LLM to a client takes. (o4) the same reconnect's \`sync\`: a resume cannot be quicker than the connection's set-up, so the ratio shows what catching up the deltas adds to it. (o5) the bare ws server's CPU per frame for the same frames to the same clients at the same pace. (o6) every connection.`,
  checks: `every run: each Tether client's event frames against the log over REST, as (a); its deltas: every stored agent reply it got came after its attempt's deltas, indexes 0, 1, 2… once each, none after it, as many as its \`data.deltas\`, joined equal to its content, and no other delta came (stale: of a reply stored before its cursor, before any event). A stream not whole is counted in (o6), a row with a target as (f4), its first cases listed below, not an error. (o4) the client came back mid-reply. The bare ws clients got every frame of their room once, in order, as sent.`,
  quick:
    '(o to o3) 4 conversations, 20 replies, a warm-up of 8; (o4) 2 runs, (o5) 20 conversations × 2 replies, 1 run, no warm-up.',
  async run(ctx) {
    Object.assign(tally, { connections: 0, clean: 0, replies: 0, whole: 0, stale: 0, problems: [] });
    const fleet = new Fleet();
    try {
      const rows = [...(await firstDelta(ctx, fleet)), ...(await resumeMid(ctx, fleet)), ...(await load(ctx, fleet))];
      tally.problems.slice(0, 10).forEach((p) => ctx.note(`**Stream not whole**: ${p}`));
      const { connections: n, clean, replies, whole, stale } = tally;
      const what = `every stream whole: ws connections of (o) to (o5), warm-ups included, where every stored reply came after its deltas (indexes 0, 1, 2… once each, joined equal to it) and no other delta came`;
      const text = `${fmt.int(clean)} of ${fmt.int(n)} (replies whole ${fmt.int(whole)} of ${fmt.int(replies)}, stale deltas ${stale})`;
      const target = { op: '≥', value: n, of: 'tether', say: '(all)' } as const;
      const baseline = { value: n, text: `${fmt.int(n)} connections` };
      return [...rows, { id: 'o6', what, tether: { value: clean, text }, baseline, target }];
    } finally {
      await fleet.stop();
    }
  },
};
