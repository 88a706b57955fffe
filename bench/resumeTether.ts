// (f) Tether's side of resume after a drop: a real Tether server on JetStream
// in this process (resumeTetherHost.ts), its clients in resumeProcess.ts. A
// watching ws client is dropped, events are stored while it is away (across a
// server restart in one case), and it reconnects with its cursor. Checked
// against the log read through REST.
import { performance } from 'node:perf_hooks';
import { cpuMeter, describeCpu, fmt, within, type CpuUse } from './measure.ts';
import type { Frame, ResumeClients } from './resumeClients.ts';
import { http, USER_PARAM } from './benchHttp.ts';
import { restEvents, type Item, type TetherHost } from './resumeTetherHost.ts';

/** Waits until the conversation is `running` with that state fact as its last stored event: nothing more comes by itself. */
async function settledRunning(base: string, user: string, id: string, deadline: number): Promise<void> {
  for (;;) {
    const info = await http<{ state: string; last_seq: number }>(base, user, `/api/conversations/${id}`);
    if (info.state === 'running') {
      const [last] = await restEvents(base, user, id, info.last_seq - 1);
      const event = last?.event as { type?: string; data?: { state?: string } } | undefined;
      if (event?.type === 'agent_state_changed' && event.data?.state === 'running') return;
    }
    if (performance.now() > deadline)
      throw new Error(`conversation ${id} is still ${info.state} after its first message`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Polls until `done` holds (a server-side fact the clients cannot see). */
async function until(what: string, deadline: number, done: () => boolean): Promise<void> {
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

export interface Verdict {
  /** Missed events that reached the client exactly once with the log's bytes (order is checked by `gapless`). */
  recovered: number;
  /** Every stored event after the cursor exactly once and in order, the missed ones, then live ones through the probe. */
  gapless: boolean;
  /** The first thing wrong, when not gapless. */
  problem?: string;
}

/** The client's frames after its reconnect against the log after its cursor. */
export function verifyResume(
  frames: readonly Frame[],
  log: readonly Item[],
  missed: readonly Item[],
  probeSeq: number,
): Verdict {
  const seen = new Map<number, number>();
  for (const [seq] of frames) seen.set(seq, (seen.get(seq) ?? 0) + 1);
  const bytes = new Map(frames.map(([seq, json]) => [seq, json]));
  const recovered = missed.filter((m) => seen.get(m.seq) === 1 && bytes.get(m.seq) === JSON.stringify(m.event)).length;
  const lastFrame = frames.at(-1)?.[0] ?? -1;
  const expected = log.filter((item) => item.seq <= lastFrame);
  let problem: string | undefined;
  if (lastFrame < probeSeq) problem = `the live probe (seq ${probeSeq}) never arrived; last frame ${lastFrame}`;
  for (let i = 0; problem === undefined && i < Math.max(expected.length, frames.length); i++) {
    const want = expected[i];
    const got = frames[i];
    if (!got) problem = `frame ${i} missing: the log has seq ${want!.seq}`;
    else if (!want) problem = `frame ${i} (seq ${got[0]}) is extra: the log has no more events through ${lastFrame}`;
    else if (got[0] !== want.seq) problem = `frame ${i} has seq ${got[0]}, the log has ${want.seq}`;
    else if (got[1] !== JSON.stringify(want.event)) problem = `the event at seq ${want.seq} differs from the log`;
  }
  if (problem === undefined && recovered !== missed.length)
    problem = `${missed.length - recovered} missed events not received exactly once`;
  return { recovered, gapless: problem === undefined, ...(problem !== undefined && { problem }) };
}

export interface TetherResumeRun extends Verdict {
  /** Stored events after the client's cursor when it reconnected (the user messages and, across a restart, lifecycle facts). */
  missed: number;
  /** User messages stored while it was away (before and after the restart). */
  written: number;
  /** User messages stored while it caught up. */
  during: number;
  /** The other missed events by type: facts the restart stored. */
  others: Record<string, number>;
  /** Reconnect (new WebSocket) to the last missed event and the sync's `through_seq` received. */
  ms: number;
  /** Reconnect to the `sync` frame. */
  syncMs: number;
  /** The live probe: one more message posted after the catch-up, until the client had it. */
  probeMs: number;
  /** Server stopped and a new one listening (restart case only). */
  restartMs?: number;
  cpu: CpuUse;
  /** The user messages written while the client was away, as stored, and the event at the client's cursor: what Socket.IO emits. */
  payloads: Frame[];
  cursorEvent: Frame;
  summary: string;
}

export interface ResumePlan {
  /** Events stored while the client is away. */
  events: number;
  /** REST requests the writer keeps in flight. */
  window: number;
  /** Stop the server after half of the events and start a new one on the same port and store. */
  restart: boolean;
  /** Messages stored while the client catches up (posted as it reconnects): the seam between history and live. 0 in measured runs. */
  during: number;
  timeoutMs: number;
}

/** Wraps the timed phase only (e.g. a CPU profiler); set-up and checks stay outside. */
export type AroundTimed = <T>(work: () => Promise<T>) => Promise<T>;

/** A conversation whose watcher was live (one event received: its cursor) and is now away. */
interface Away {
  id: string;
  user: string;
  cursor: number;
  wsUrl: (afterSeq: number) => string;
  actions: () => string;
}

/** A new conversation, running; the watcher connects, gets one live event, is dropped, and the server sees it go. */
async function watchThenDrop(host: TetherHost, clients: ResumeClients, user: string, timeoutMs: number): Promise<Away> {
  const deadline = performance.now() + timeoutMs;
  const base = () => host.current.base;
  const { conversation_id: id } = await http<{ conversation_id: string }>(base(), user, '/api/conversations', {
    initial_message: 'Think about this for a while.',
    max_iterations: 10_000,
  });
  await within(timeoutMs, 'conversation start-up', settledRunning(base(), user, id, deadline));
  const wsUrl = (after: number) =>
    `ws://127.0.0.1:${host.current.port}/ws?${USER_PARAM}=${user}&conversation_id=${id}&after_seq=${after}`;
  const actions = () => `${base()}/api/conversations/${id}/actions`;
  const { last_seq: start } = await http<{ last_seq: number }>(base(), user, `/api/conversations/${id}`);
  await clients.ask({ type: 'tether.watch', url: wsUrl(start) }, 'ok');
  await clients.ask({ type: 'tether.probe', url: actions(), user, label: `${user}-before` }, 'probed');
  const { cursor } = await clients.ask({ type: 'tether.drop' }, 'dropped');
  await until('the server saw the watcher go', deadline, () => host.current.manager.feed.count(id) === 0);
  return { id, user, cursor, wsUrl, actions };
}

/** Stores the plan's messages while the watcher is away: half, a restart, the other half when the plan says so. */
async function storeWhileAway(
  host: TetherHost,
  clients: ResumeClients,
  away: Away,
  plan: ResumePlan,
): Promise<{ seqs: number[]; restartMs?: number }> {
  const write = async (count: number, label: string) => {
    const writes = { url: away.actions(), user: away.user, count, window: plan.window, label: `${away.user}-${label}` };
    return (
      await within(
        plan.timeoutMs,
        'writing while the client is away',
        clients.ask({ type: 'tether.write', ...writes }, 'written'),
      )
    ).seqs;
  };
  if (!plan.restart) return { seqs: await write(plan.events, 'away') };
  const first = Math.floor(plan.events / 2);
  const before = await write(first, 'before-restart');
  const restartMs = await host.restart();
  return { seqs: [...before, ...(await write(plan.events - first, 'after-restart'))], restartMs };
}

/**
 * One resume on Tether: a new conversation (user `user`), the watcher live
 * on it, dropped, `plan.events` user messages stored meanwhile by another
 * client through REST, then the watcher reconnects with its cursor.
 */
export async function tetherResumeRun(
  natsPid: number,
  host: TetherHost,
  clients: ResumeClients,
  plan: ResumePlan,
  user: string,
  around: AroundTimed = (work) => work(),
): Promise<TetherResumeRun> {
  const away = await watchThenDrop(host, clients, user, plan.timeoutMs);
  const { seqs, restartMs } = await storeWhileAway(host, clients, away, plan);
  const { base } = host.current;
  const missed = await restEvents(base, user, away.id, away.cursor);
  const during =
    plan.during > 0
      ? { during: { url: away.actions(), user, count: plan.during, window: plan.window, label: `${user}-during` } }
      : {};
  const resume = {
    type: 'tether.resume',
    url: away.wsUrl(away.cursor),
    lastSeq: missed.at(-1)?.seq ?? away.cursor,
    ...during,
  } as const;
  const cpu = cpuMeter(natsPid, clients.pid);
  const resumed = await around(() => within(plan.timeoutMs, 'the resume', clients.ask(resume, 'resumed')));
  const used = cpu();
  const probe = await clients.ask(
    { type: 'tether.probe', url: away.actions(), user, label: `${user}-after` },
    'probed',
  );
  const { frames } = await clients.ask({ type: 'tether.frames' }, 'frames');
  await clients.ask({ type: 'close' }, 'ok');
  const verdict = verifyResume(frames, await restEvents(base, user, away.id, away.cursor), missed, probe.seq);
  const [atCursor] = await restEvents(base, user, away.id, away.cursor - 1);
  // Out of the next restart's recovery: this conversation is done.
  await http(base, user, `/api/conversations/${away.id}/stop`, {});

  const restart = restartMs === undefined ? '' : `, restart ${fmt.ms(restartMs)} ms`;
  const meanwhile = resumed.during.length
    ? ` (+${fmt.int(resumed.during.length)} messages stored while it caught up: not a timing)`
    : '';
  return {
    ...verdict,
    missed: missed.length,
    written: seqs.length,
    during: resumed.during.length,
    others: othersByType(missed, seqs),
    ms: resumed.ms,
    syncMs: resumed.connectMs,
    probeMs: probe.ms,
    ...(restartMs !== undefined && { restartMs }),
    cpu: used,
    payloads: writtenFrames(missed, seqs),
    cursorEvent: [away.cursor, JSON.stringify(atCursor!.event)],
    summary:
      `${fmt.int(verdict.recovered)}/${fmt.int(missed.length)} missed events recovered (${fmt.int(seqs.length)} user messages), ` +
      `${verdict.gapless ? 'gapless' : `NOT gapless: ${verdict.problem}`}, ${resumed.caughtUp ? 'caught up' : 'NOT caught up (gave up waiting)'} in ${fmt.ms(resumed.ms)} ms${meanwhile} (sync ${fmt.ms(resumed.connectMs)} ms), ` +
      `live probe ${fmt.ms(probe.ms)} ms${restart} (${describeCpu(used)})`,
  };
}

/** The written messages as stored (seq and JSON), for the baseline to emit the same events. */
function writtenFrames(missed: readonly Item[], seqs: readonly number[]): Frame[] {
  const bySeq = new Map(missed.map((m) => [m.seq, JSON.stringify(m.event)]));
  return seqs.map((seq): Frame => {
    const json = bySeq.get(seq);
    if (json === undefined) throw new Error(`written event ${seq} is not among the missed events`);
    return [seq, json];
  });
}

/** The missed events that are not the written messages, counted by type. */
function othersByType(missed: readonly Item[], seqs: readonly number[]): Record<string, number> {
  const written = new Set(seqs);
  const others: Record<string, number> = {};
  for (const m of missed) {
    const type = (m.event as { type: string }).type;
    if (!written.has(m.seq)) others[type] = (others[type] ?? 0) + 1;
  }
  return others;
}
