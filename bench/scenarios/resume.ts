// (f to f4) Resume: a ws client away while 1,000 events are stored comes back with its cursor, after a drop and
// across a server restart, vs Socket.IO connection state recovery. Exports run in the host or the fleet, as named.
import WebSocket from 'ws';
import * as sio from '../baselines/socketIo.ts';
import { protocolClient, type ProtocolClient } from '../../src/client/index.ts';
import { Fleet, type Frame } from '../harness/fleet.ts';
import { checkFrames, hosted, rest, restEvents, TetherHost } from '../harness/host.ts';
import { fmt, median, timed, until } from '../harness/measure.ts';
import { msFigure, repeat, reps, type Row, type Scenario } from '../harness/scenario.ts';

const [EVENTS, WINDOW, DURING] = [1_000, 16, 200];
const SIO = import.meta.url.replace('/scenarios/resume.', '/baselines/socketIo.');
// In the host: the watcher's drop seen; the recovery `tether serve` runs after a start.
export const watchersGone = (id: string) =>
  until(`${id}'s watcher gone`, async () => hosted().tether.host.feed.count(id) === 0 || undefined, 60_000, 1);
export const recover = () => hosted().tether.host.recover();

// In the fleet: the watcher (a protocol client keeping each event frame: seq and the event's JSON as sent), the writer.
let [frames, after, failure, poke] = [[] as Frame[], 0, '', () => {}];
let [client, at] = [null as ProtocolClient<WebSocket> | null, { base: '', ws: '', user: '', id: '' }];
/** True once the watcher has an event at or past `seq`; false on a failure or after 10 s (the check reports it). */
const reach = (seq: number) =>
  new Promise<boolean>((resolve) => {
    setTimeout(() => resolve(false), 10_000).unref();
    (poke = () => void ((failure || (frames.at(-1)?.[0] ?? after) >= seq) && resolve(!failure)))();
  });
/** Opens it after `from`; the ms to its `sync` frame. */
const open = (from: number, where = at) =>
  new Promise<number>((resolve) => {
    const keep = (s: number, t: string) => (frames.push([s, t.slice(t.indexOf('"event":') + 8, -1)]), poke());
    [frames, after, failure, at] = [[], from, '', where];
    const [t0, url] = [performance.now(), `${at.ws}/ws?token=${at.user}&conversation_id=${at.id}&after_seq=${from}`];
    const c: ProtocolClient<WebSocket> = (client = protocolClient({
      ...{ WebSocket, url, reconnect: false },
      handlers: {
        sync: () => resolve(performance.now() - t0),
        event: (f, text) => keep(f.seq, text),
        // A frame sent twice or out of order is kept as it came, for the check to find.
        invalid: (f) => keep((f.value as { seq?: number } | undefined)?.seq ?? -1, f.raw),
        close: ({ code }) => client === c && ((failure ||= `ws closed (${code})`), poke(), resolve(-1)),
      },
    }));
  });
/** Posts `count` user messages over REST, `window` in flight, each with a client_id (sent again on a failure); their seqs. */
export async function write(count: number, label: string, window = WINDOW) {
  const [seqs, path] = [[] as number[], `/api/conversations/${at.id}/actions`];
  const action = { type: 'message', content: 'away '.repeat(24) };
  const post = (i: number) => rest<{ seq: number }>(at.base, at.user, path, { action, client_id: `${label}${i}` });
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < count; i = next++) seqs[i] = (await post(i).catch(() => post(i))).seq;
  };
  await Promise.all(Array.from({ length: Math.min(window, count) }, worker));
  return seqs;
}
/** Watches, gets one message live, and is dropped with `terminate()` (no close handshake); its cursor. */
export async function watchThenDrop(where: typeof at, start: number): Promise<number> {
  await open(start, where);
  const [seq] = await write(1, 'before', 1);
  if (!(await reach(seq!))) throw new Error(`${at.id}: seq ${seq} did not come live (${failure})`);
  [client] = [null, client?.socket?.terminate()];
  return frames.at(-1)![0];
}
/** Back after `cursor`: timed from the new socket to the last missed event; `during` messages are posted meanwhile. */
export async function resumeTether(cursor: number, lastSeq: number, during: number) {
  const [meanwhile, t0] = [write(during, 'during'), performance.now()];
  const syncMs = await open(cursor);
  const caughtUp = await reach(lastSeq);
  const ms = performance.now() - t0;
  await reach(Math.max(-1, ...(await meanwhile)));
  return { ms, syncMs, caughtUp };
}
/** One more message must come live; the frames since the reconnect. */
export async function afterResume() {
  const [probe] = await write(1, 'after', 1);
  await reach(probe!);
  [client] = [null, client?.close()];
  return { frames, failure };
}

let [users, server] = [0, {} as sio.SocketIoServer]; // the baseline's server, replaced by a restart

/** One resume on Tether, then on Socket.IO (its client has one event, its offset, and the same messages go to its room). */
async function pair(host: TetherHost, fleet: Fleet, restart: boolean, during: number) {
  const [base, user, me, half] = [host.base, `resume${users++}`, import.meta.url, restart ? EVENTS / 2 : EVENTS];
  const body = { initial_message: 'Think about this for a while.', max_iterations: 10_000 };
  const { conversation_id: id } = await rest<{ conversation_id: string }>(base, user, '/api/conversations', body);
  const start = await until(`${id} running, that fact its last event (nothing more comes by itself)`, async () => {
    const { last_seq: seq } = await rest<{ last_seq: number }>(base, user, `/api/conversations/${id}`);
    const [last] = await restEvents(base, user, id, seq - 1);
    return (last?.event as { data?: { state?: string } }).data?.state === 'running' ? seq : undefined;
  });
  const cursor = await fleet.call(me, watchThenDrop, [{ base, ws: host.ws, user, id }, start]);
  await host.proc.call(me, watchersGone, [id]);
  const seqs = await fleet.call(me, write, [half, 'away']);
  if (restart) await host.restart().then(() => host.proc.call(me, recover, []));
  if (restart) seqs.push(...(await fleet.call(me, write, [EVENTS - half, 'restarted'])));
  const missed = await restEvents(base, user, id, cursor);
  const t = await timed(() => fleet.call(me, resumeTether, [cursor, missed.at(-1)!.seq, during]));
  const { frames, failure } = await fleet.call(me, afterResume, []);
  const problem = failure || (await checkFrames(base, user, id, cursor, [frames]).then(() => '', String));
  const got = missed.filter((m) => frames.filter(([seq]) => seq === m.seq).length === 1).length;
  await rest(base, user, `/api/conversations/${id}/stop`, {}); // out of the next restart's recovery
  const written = new Set(seqs);
  const others = missed.filter((m) => !written.has(m.seq)).map((m) => (m.event as { type: string }).type);
  const payloads = missed.filter((m) => written.has(m.seq)).map((m): [number, unknown] => [m.seq, m.event]);
  const [room, first, probe, event] = [`r${users}`, payloads[0]![0] - 1, payloads.at(-1)![0] + 1, payloads[0]![1]];
  await Promise.all([
    server.proc.call(SIO, sio.emitAcrossDrop, [room, [first, event], payloads.slice(0, half)]),
    fleet.call(SIO, sio.sioAway, [server.url, room, first]),
  ]);
  if (restart) await server.restart();
  await server.proc.call(SIO, sio.emitToRoom, [room, payloads.slice(half)]);
  const s = await timed(() => fleet.call(SIO, sio.sioResume, [probe - 1]));
  await server.proc.call(SIO, sio.emitToRoom, [room, [[probe, event]]]);
  const v = await fleet.call(SIO, sio.sioSeqs, [probe, payloads.map(([seq]) => seq)]);
  return {
    t: { ...t.value, got, problem, missed: missed.length },
    s: { ...s.value, ...v, missed: payloads.length },
    use: [t, s],
    summary: `Tether ${fmt.int(got)}/${fmt.int(missed.length)} missed events recovered${others.length ? ` (with ${others.join(', ')})` : ''}, ${problem ? `NOT gapless: ${problem}` : 'gapless'}, ${t.value.caughtUp ? '' : 'NOT '}caught up in ${fmt.ms(t.value.ms)} ms (sync ${fmt.ms(t.value.syncMs)} ms)${during ? `, ${during} posted meanwhile` : ''}; Socket.IO socket.recovered ${s.value.recovered}, ${s.value.recovered ? 'caught up' : 'reconnected'} in ${fmt.ms(s.value.ms)} ms (connect ${fmt.ms(s.value.connectMs)} ms), ${v.gapless ? '' : 'not '}gapless`,
  };
}
type Run = Awaited<ReturnType<typeof pair>>;

const F4 = `gapless in every case: resumes where the client got every missed event once and in order, then the live ones (every resume of (f) to (f3), warm-ups with events stored during the catch-up and runs done again included), vs Socket.IO's`;
const all = (value: number, say: string) => ({ op: '≥', value, of: 'tether', say }) as const;

export const resume: Scenario = {
  name: 'resume',
  setup: `a Tether host (thinking agent: each user message after the first is one stored event) and the client fleet; per run a new conversation, running after its initial message; a watcher (the protocol client, in the fleet) gets one message live (its cursor) and is dropped with \`terminate()\`; once the host has seen it go, ${fmt.int(EVENTS)} user messages are posted from the fleet to \`/api/conversations/:id/actions\` (${WINDOW} in flight, each with a client_id); across a restart (f2, f3) half of them, then \`host.restart()\` (a new process on the same stores and port, then \`recover()\`, awaited), then the rest.`,
  load: `the watcher back with \`after_seq\` = its cursor, timed in the fleet from its new socket to the last missed event; then one more message must come live. After a drop 2 warm-ups and 9 runs, across a restart 1 and 5; medians. The warm-ups also post ${DURING} messages while the watcher catches up (the seam between history and live).`,
  baseline: `Socket.IO 4.8 with connection state recovery (one server in its own process, websocket only, a room per run), its client in the fleet (\`reconnection: false\`): it joins a room and gets one event (its offset), its websocket is terminated (the server sees a transport close), Tether's ${fmt.int(EVENTS)} messages (seq, event) are emitted to the room (across a restart: half, the server closed and a new one started in its process on its port, the rest), then \`socket.connect()\`, timed to connected and, when \`socket.recovered\`, to the last missed event; then one live event. A restarted server has none of the old one's sessions (kept in memory): \`socket.recovered\` is false and (f2) times the reconnect alone.`,
  checks: `Tether: the watcher's frames since the reconnect against the REST events after its cursor: every event once, in order, same seq and JSON, through the live one (gapless); recovered = missed events received once. Socket.IO: recovered = missed events received once; gapless = the missed seqs in order, then the live one. (f1, f3): every kept run gapless; (f4): every resume, warm-ups and runs done again included. Ratios: (f1, f3) the share of missed events recovered, (f4) resumes gapless, Tether ÷ Socket.IO.`,
  quick: 'no warm-up; 2 runs after a drop, 1 across a restart.',
  async run(ctx) {
    const [fleet, host] = [new Fleet(), await TetherHost.start(ctx, { tag: ctx.tag('f'), agent: 'thinking' })];
    server = await sio.SocketIoServer.start();
    const [every, out]: [Run[], Row[]] = [[], []];
    try {
      for (const restart of [false, true]) {
        const r = reps(ctx, { warmups: 0, runs: restart ? 1 : 2 }, { warmups: restart ? 1 : 2, runs: restart ? 5 : 9 });
        const where = restart ? 'across a server restart' : 'after a drop';
        const once = (i: number) =>
          pair(host, fleet, restart, i < r.warmups ? DURING : 0).then((x) => (every.push(x), x));
        const runs = await repeat(ctx, where, r, once);
        const sum = (side: 't' | 's', k: 'got' | 'missed') => runs.reduce((a, x) => a + x[side][k], 0);
        const [t, tm, s, sm] = [sum('t', 'got'), sum('t', 'missed'), sum('s', 'got'), sum('s', 'missed')];
        const [gapless, flagged] = [runs.filter((x) => !x.t.problem).length, runs.filter((x) => x.s.recovered).length];
        const [n, tms, sms] = [runs.length, median(runs.map((x) => x.t.ms)), median(runs.map((x) => x.s.ms))];
        const time = `resume ${where}: a ws client away while ${fmt.int(EVENTS)} events are stored reconnects with its cursor; from its new connection to the last missed event (median of ${n}), vs Socket.IO connection state recovery (${flagged ? 'to caught up' : 'to reconnected, nothing recovered'})`;
        const count = `events recovered out of events missed ${where} (${n} runs together${restart ? "; Tether's include the facts the restart stored" : ''}), vs Socket.IO's (\`socket.recovered\` in ${flagged} of ${n})`;
        const tether = { value: gapless, text: `${fmt.int(t)} / ${fmt.int(tm)}, gapless in ${gapless} of ${n}` };
        const baseline = { value: s / sm, text: `${fmt.int(s)} / ${fmt.int(sm)}` };
        const noSlower = restart ? undefined : ({ op: '≤', value: 1, say: "(no slower than Socket.IO's)" } as const);
        out.push({
          id: restart ? 'f2' : 'f',
          what: time,
          tether: msFigure(tms),
          baseline: msFigure(sms),
          target: noSlower,
        });
        const [ratio, target] = [t / tm / (s / sm), all(n, 'gapless (each missed event once, in order)')];
        out.push({ id: restart ? 'f3' : 'f1', what: count, tether, baseline, ratio, target });
      }
      every.forEach((x) => x.t.problem && ctx.note(`**Not gapless**: ${x.summary}`));
      const of = (f: (x: Run) => unknown) => every.filter(f).length;
      const [tg, sg, n] = [of((x) => !x.t.problem), of((x) => x.s.gapless), every.length];
      const fig = (value: number) => ({ value, text: `${value} of ${n}` });
      return [...out, { id: 'f4', what: F4, tether: fig(tg), baseline: fig(sg), target: all(n, '(all)') }];
    } finally {
      await host.stop(ctx.nc);
      await Promise.all([fleet.stop(), server.stop()]);
    }
  },
};
