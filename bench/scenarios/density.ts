// (g to g4) Density: N conversations with one ws connection each on a Tether host, sessions live and then
// hibernated, against a bare ws server holding N idle connections: heap and RSS per connection, each read in
// the server's own process. The clients are the fleet's: the exported functions run in the fleet process.
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import WebSocket from 'ws';
import { BareWsServer } from '../baselines/bareWs.ts';
import { plug, run, Fleet, TetherMember, type ClientSpec } from '../harness/fleet.ts';
import { TetherHost } from '../harness/host.ts';
import { fmt, timed, until } from '../harness/measure.ts';
import type { Row, Scenario } from '../harness/scenario.ts';
import { createSessions, hostState, inHost, kib, LONG, mib, passivateSessions } from './heap.ts';

const WARM_UP = 20; // connections made and closed first (Tether: created, connected, hibernated, woken, hibernated)
const SAMPLE = 20; // hibernated conversations whose clients then send a message: their connections still work
const HERE = import.meta.url;
type Reading = { heap: number; code: number; rss: number; connections: number; live?: number };

let clients: Array<TetherMember | WebSocket> = [];
let lost = 0;
const limit = pLimit(200);

/** A Tether client per spec (connected on its `sync`), or a bare ws socket per url; 200 connecting at a time; ms. */
export async function connectIdle(targets: Array<ClientSpec | string>): Promise<number> {
  const t0 = performance.now();
  const open = (t: ClientSpec | string) =>
    new Promise<TetherMember | WebSocket>((resolve, reject) => {
      if (typeof t === 'string') {
        const ws = new WebSocket(t, { perMessageDeflate: false });
        ws.on('error', reject).on('open', () => resolve(ws));
      } else {
        const m: TetherMember = new TetherMember(t, (e) => (e ? reject(e) : resolve(m)));
        void m.reached(Number.MAX_SAFE_INTEGER).catch(() => lost++);
      }
    });
  clients = await Promise.all(targets.map((t) => limit(() => open(t))));
  return performance.now() - t0;
}

type Ev = { source: string; type: string };
const key = (e: Ev) => `${e.source}:${e.type} `;

// Checks that every Tether client's socket is open, none was lost and each was told its session hibernated; then
// these clients each send a message and await the agent's answer, `session_rehydrated` first; ms.
export async function wake(indexes: number[]): Promise<number> {
  const members = clients.filter((c) => c instanceof TetherMember);
  const types = (m: TetherMember) => m.frames.map(([, json]) => key(JSON.parse(json) as Ev)).join('');
  const tellAll = () => members.filter((m) => types(m).includes(':session_passivated ')).length;
  // Delivered through the log's follow: the last may still be on its way.
  const told = await until(
    'hibernation told',
    async () => (tellAll() === members.length ? tellAll() : undefined),
    10_000,
  ).catch(tellAll);
  const open = members.filter((m) => m.client.socket?.readyState === WebSocket.OPEN).length;
  if (open < members.length || lost || told < members.length)
    throw new Error(`of ${members.length} clients: ${open} open, ${lost} lost, ${told} told of their hibernation`);
  const woken = indexes.map((i) => members[i]!);
  plug(woken.map((m) => [m]));
  const ms = await run(1, 1, true);
  const bad = woken.find((m) => !/:session_rehydrated .*user:message .*agent:(message|finish) /.test(types(m)));
  if (bad) throw new Error(`${bad.spec.conversationId}: not rehydrated, message, answer: ${types(bad)}`);
  return ms;
}

export async function closeIdle(): Promise<void> {
  clients.forEach((c) => (c instanceof TetherMember ? c.close() : c.close(1000)));
  [clients, lost] = [[], 0];
  plug([]);
}

/** A server's reading once it holds `connections` (Tether: and `live` sessions in memory); closing takes a moment. */
async function reading(read: () => Promise<Reading>, connections: number, live?: number) {
  const fits = (r: Reading) => (r.connections === connections && r.live === live ? r : undefined);
  return until(`a server with ${connections} connections, ${live ?? 'no'} sessions`, () => read().then(fits), 10_000);
}

async function bareRun(fleet: Fleet, server: BareWsServer, n: number) {
  const connect = (k: number) => fleet.call(HERE, connectIdle, [Array<string>(k).fill(server.url)], LONG);
  await connect(WARM_UP);
  await fleet.call(HERE, closeIdle, []);
  const empty = await reading(() => server.memory(), 0);
  const ms = await connect(n);
  const full = await reading(() => server.memory(), n);
  await fleet.call(HERE, closeIdle, []);
  return { empty, full, ms };
}

async function tetherRun(fleet: Fleet, host: TetherHost, n: number) {
  const call = inHost(host);
  const read = (connections: number, live: number) => reading(() => call(hostState), connections, live);
  const warm = await call(createSessions, WARM_UP, n, host.ws);
  await fleet.call(HERE, connectIdle, [warm]);
  await call(passivateSessions, warm, 'idle');
  await fleet.call(HERE, wake, [warm.map((_, i) => i)]);
  await fleet.call(HERE, closeIdle, []);
  await call(passivateSessions, warm, 'idle');
  const empty = await read(0, 0);
  const made = await timed(() => call(createSessions, n, 0, host.ws));
  const connectMs = await fleet.call(HERE, connectIdle, [made.value], LONG);
  const live = await read(n, n);
  const slept = await timed(() => call(passivateSessions, made.value, 'idle'));
  const hibernated = await read(n, 0);
  const sample = Array.from({ length: SAMPLE }, (_, k) => Math.floor((k * n) / SAMPLE));
  const wakeMs = await fleet.call(HERE, wake, [sample], LONG);
  await read(n, SAMPLE);
  await fleet.call(HERE, closeIdle, []);
  return { empty, live, hibernated, createMs: made.ms, connectMs, passivateMs: slept.ms, wakeMs };
}

export const density: Scenario = {
  name: 'density',
  setup:
    'a Tether host and a bare ws server, each in a process of its own with --expose-gc; the clients in the fleet process (200 connecting at a time, no permessage-deflate). Warm-up first: 20 connections opened and closed (Tether: 20 conversations created, connected, hibernated, woken by a message, hibernated again), so that the empty readings include the code those paths load.',
  load: "in each server's process, heapUsed after full GCs (until it stops shrinking) and RSS: empty; bare ws holding N idle connections; Tether with N conversations created and started (one user each, awaiting input), each with one client on `/ws?conversation_id=…&after_seq=<its last seq>` connected on its `sync` (sessions live); then after `host.passivate(id, 'idle')` of each (200 at a time), connections open (hibernated). N = 10,000; per connection = (reading − empty) ÷ N. Once.",
  baseline:
    'a bare `new WebSocketServer({ host, port })` with no logic (one shared no-op `error` listener per socket) holding N idle connections.',
  checks:
    "each reading shows its N (or 0) connections and, on Tether, N sessions in memory live, 0 hibernated; after hibernation every client's socket is open, none was lost, each got its `session_passivated`; then 20 clients spread over the N each send a message and get `session_rehydrated`, it and the agent's answer, and exactly those 20 sessions are in memory.",
  quick: 'N = 1,000.',
  async run(ctx) {
    const n = ctx.quick ? 1_000 : 10_000;
    const fleet = new Fleet();
    const server = await BareWsServer.start();
    const host = await TetherHost.start(ctx, { tag: ctx.tag('g') }, { gc: true });
    try {
      const b = await bareRun(fleet, server, n);
      const t = await tetherRun(fleet, host, n);
      const reads = (r: Reading) => `heap ${mib(r.heap)} (code ${mib(r.code)}), RSS ${mib(r.rss)}`;
      ctx.log(
        `bare ws: empty ${reads(b.empty)}; ${fmt.int(n)} connections ${reads(b.full)}, connected in ${fmt.ms(b.ms)} ms`,
      );
      ctx.log(
        `Tether: empty ${reads(t.empty)}; live ${reads(t.live)}; hibernated ${reads(t.hibernated)}; created and started in ${fmt.ms(t.createMs)} ms, connected in ${fmt.ms(t.connectMs)} ms, hibernated in ${fmt.ms(t.passivateMs)} ms, ${SAMPLE} woken in ${fmt.ms(t.wakeMs)} ms`,
      );
      const per = (from: Reading, to: Reading, k: 'heap' | 'rss' | 'code') => (to[k] - from[k]) / n;
      ctx.note(
        `The heap figures include V8's code space, which grows with the code a run made hot (once, not per connection): ${kib(per(t.empty, t.live, 'code'))} per connection live, ${kib(per(t.empty, t.hibernated, 'code'))} hibernated, ${kib(per(b.empty, b.full, 'code'))} bare ws. The hibernated figures also count what live sessions left in tables V8 does not shrink (see (e2)); RSS keeps pages the heap freed.`,
      );
      const row = (id: string, k: 'heap' | 'rss', to: Reading, sessions: string, target?: Row['target']): Row => {
        const figure = (value: number) => ({ value, text: `${kib(value)}/connection` });
        const what = `${k === 'heap' ? 'heap' : 'RSS'} per ws connection, ${fmt.int(n)} conversations with one each, sessions ${sessions}, vs a bare ws server's idle connections`;
        return { id, what, tether: figure(per(t.empty, to, k)), baseline: figure(per(b.empty, b.full, k)), target };
      };
      const hibernated = 'hibernated (liveCount 0, connections open and working)';
      return [
        row('g', 'heap', t.live, 'live'),
        row('g2', 'heap', t.hibernated, hibernated, { op: '≤', value: 2 }),
        row('g3', 'rss', t.live, 'live'),
        row('g4', 'rss', t.hibernated, hibernated),
      ];
    } finally {
      await Promise.all([server.stop(), host.stop(ctx.nc), fleet.stop()]);
    }
  },
};
