// (f) Tether's side of resume after a drop: a real Tether server on JetStream
// (KV stores, in-memory runtime, scripted agent) in this process, its
// clients in resumeProcess.ts. A watching ws client is dropped, events are
// stored while it is away (across a server restart in one case), and it
// reconnects with its cursor. Checked against the log read through REST.
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { memoryRuntimeProvider } from '../src/runtime/memoryRuntime.ts';
import { tetherServer } from '../src/server/index.ts';
import { SessionManager } from '../src/session/index.ts';
import { connectNats, jetStreamEventLog, kvConversationStore, kvSnapshotStore } from '../src/store/index.ts';
import { cpuMeter, describeCpu, fmt, within, type CpuUse } from './measure.ts';
import type { Frame, ResumeClients } from './resumeClients.ts';

/** Where one bench's Tether keeps its events: fresh names per run of the bench. */
export interface TetherStoreNames {
  stream: string;
  subjectPrefix: string;
  conversations: string;
  snapshots: string;
}

/** One Tether server as `tether serve` runs it: its own NATS connection, stores, session manager and listener. */
export interface TetherInstance {
  port: number;
  base: string;
  manager: SessionManager;
  /** Stops it the way SIGTERM does (src/cli/serve.ts): server closed (1001), sessions passivated, NATS drained. */
  stop(): Promise<void>;
}

const USER_HEADER = 'x-bench-user';
const USER_PARAM = 'bench_user';
const benchAuthenticate = async (req: IncomingMessage, url: URL): Promise<string> =>
  url.searchParams.get(USER_PARAM) ?? (req.headers[USER_HEADER] as string | undefined) ?? 'local';

/** Starts a Tether server on `port` (0: any free one) over the named stream and buckets. */
async function startTether(natsUrl: string, names: TetherStoreNames, port = 0): Promise<TetherInstance> {
  const nc = await connectNats(natsUrl, { name: 'tether-bench-resume' });
  const log = await jetStreamEventLog(nc, { stream: names.stream, subjectPrefix: names.subjectPrefix });
  const manager = new SessionManager({
    log,
    conversations: await kvConversationStore(nc, { bucket: names.conversations }),
    snapshots: await kvSnapshotStore(nc, { bucket: names.snapshots }),
    runtimes: memoryRuntimeProvider(),
    // The agent thinks for 10 minutes after a message: every further user message is stored as exactly one event.
    agentFor: () => scriptedAgent({ delayMs: 10 * 60_000 }),
    logger: silentLogger,
  });
  const server = tetherServer({ manager, logger: silentLogger, maxFrameBytes: 1 << 20, maxBodyBytes: 1 << 20, authenticate: benchAuthenticate });
  const address = await server.listen(port, '127.0.0.1');
  // As serve does after listening: conversations that were mid-task come back by themselves.
  const recovering = manager.recover().catch(() => 0);
  return {
    port: address.port,
    base: `http://127.0.0.1:${address.port}`,
    manager,
    stop: async () => {
      await recovering;
      await server.close();
      await manager.shutdown();
      await nc.drain();
    },
  };
}

/** The Tether server of the resume bench: one at a time, restarted on the same port and store. */
export class TetherHost {
  readonly #natsUrl: string;
  readonly #names: TetherStoreNames;
  #instance: TetherInstance | null;

  private constructor(natsUrl: string, names: TetherStoreNames, instance: TetherInstance) {
    this.#natsUrl = natsUrl;
    this.#names = names;
    this.#instance = instance;
  }

  static async start(natsUrl: string, names: TetherStoreNames): Promise<TetherHost> {
    return new TetherHost(natsUrl, names, await startTether(natsUrl, names));
  }

  get current(): TetherInstance {
    if (!this.#instance) throw new Error('no Tether server is running');
    return this.#instance;
  }

  /** Stops the server as SIGTERM does and starts a new one on the same port and store; the ms it took. */
  async restart(): Promise<number> {
    const t0 = performance.now();
    const { port } = this.current;
    await this.stop();
    this.#instance = await startTether(this.#natsUrl, this.#names, port);
    return performance.now() - t0;
  }

  async stop(): Promise<void> {
    const instance = this.#instance;
    this.#instance = null;
    await instance?.stop();
  }
}

interface Item {
  seq: number;
  event: unknown;
}

async function http<T>(base: string, user: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${base}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { [USER_HEADER]: user, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** Every stored event of the conversation after `afterSeq`, through REST. */
async function restEvents(base: string, user: string, id: string, afterSeq: number): Promise<Item[]> {
  const items: Item[] = [];
  for (let cursor = afterSeq; ; ) {
    const page = await http<{ items: Item[]; has_more: boolean }>(base, user, `/api/conversations/${id}/events?after_seq=${cursor}&limit=1000`);
    items.push(...page.items);
    if (!page.has_more || page.items.length === 0) return items;
    cursor = page.items.at(-1)!.seq;
  }
}

/** Waits until the conversation is `running` with that state fact as its last stored event: nothing more comes by itself. */
async function settledRunning(base: string, user: string, id: string, deadline: number): Promise<void> {
  for (;;) {
    const info = await http<{ state: string; last_seq: number }>(base, user, `/api/conversations/${id}`);
    if (info.state === 'running') {
      const [last] = await restEvents(base, user, id, info.last_seq - 1);
      const event = last?.event as { type?: string; data?: { state?: string } } | undefined;
      if (event?.type === 'agent_state_changed' && event.data?.state === 'running') return;
    }
    if (performance.now() > deadline) throw new Error(`conversation ${id} is still ${info.state} after its first message`);
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
  /** Missed events that reached the client exactly once, in order, with the log's bytes. */
  recovered: number;
  /** Every stored event after the cursor exactly once and in order, the missed ones, then live ones through the probe. */
  gapless: boolean;
  /** The first thing wrong, when not gapless. */
  problem?: string;
}

/** The client's frames after its reconnect against the log after its cursor. */
export function verifyResume(frames: readonly Frame[], log: readonly Item[], missed: readonly Item[], probeSeq: number): Verdict {
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
  if (problem === undefined && recovered !== missed.length) problem = `${missed.length - recovered} missed events not received exactly once`;
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
  let tether = host.current;
  const deadline = performance.now() + plan.timeoutMs;
  const { conversation_id: id } = await http<{ conversation_id: string }>(tether.base, user, '/api/conversations', {
    initial_message: 'Think about this for a while.',
    max_iterations: 10_000,
  });
  await within(plan.timeoutMs, 'conversation start-up', settledRunning(tether.base, user, id, deadline));
  const wsUrl = (after: number) => `ws://127.0.0.1:${tether.port}/ws?${USER_PARAM}=${user}&conversation_id=${id}&after_seq=${after}`;
  const actions = () => `${tether.base}/api/conversations/${id}/actions`;
  const { last_seq: start } = await http<{ last_seq: number }>(tether.base, user, `/api/conversations/${id}`);

  // Live, with one event received: its cursor.
  await clients.ask({ type: 'tether.watch', url: wsUrl(start) }, 'ok');
  await clients.ask({ type: 'tether.probe', url: actions(), user, label: `${user}-before` }, 'probed');
  const { cursor } = await clients.ask({ type: 'tether.drop' }, 'dropped');
  // Away: the server has seen the connection go.
  await until('the server saw the watcher go', deadline, () => tether.manager.feed.count(id) === 0);

  const write = (count: number, label: string) =>
    within(plan.timeoutMs, 'writing while the client is away', clients.ask({ type: 'tether.write', url: actions(), user, count, window: plan.window, label }, 'written'));
  const first = plan.restart ? Math.floor(plan.events / 2) : plan.events;
  const seqs = [...(await write(first, `${user}-a`)).seqs];
  let restartMs: number | undefined;
  if (plan.restart) {
    restartMs = await host.restart();
    tether = host.current;
    seqs.push(...(await write(plan.events - first, `${user}-b`)).seqs);
  }

  const missed = await restEvents(tether.base, user, id, cursor);
  const lastSeq = missed.at(-1)?.seq ?? cursor;
  const cpu = cpuMeter(natsPid, clients.pid);
  const resumed = await around(() =>
    within(
      plan.timeoutMs,
      'the resume',
      clients.ask(
        {
          type: 'tether.resume',
          url: wsUrl(cursor),
          lastSeq,
          ...(plan.during > 0 && { during: { url: actions(), user, count: plan.during, window: plan.window, label: `${user}-during` } }),
        },
        'resumed',
      ),
    ),
  );
  const used = cpu();
  const probe = await clients.ask({ type: 'tether.probe', url: actions(), user, label: `${user}-after` }, 'probed');
  const { frames } = await clients.ask({ type: 'tether.frames' }, 'frames');
  await clients.ask({ type: 'close' }, 'ok');
  const log = await restEvents(tether.base, user, id, cursor);
  const verdict = verifyResume(frames, log, missed, probe.seq);

  const byseq = new Map(missed.map((m) => [m.seq, JSON.stringify(m.event)]));
  const payloads = seqs.map((seq): Frame => {
    const json = byseq.get(seq);
    if (json === undefined) throw new Error(`written event ${seq} is not in the log after the cursor ${cursor}`);
    return [seq, json];
  });
  const others: Record<string, number> = {};
  const writtenSeqs = new Set(seqs);
  for (const m of missed) {
    const type = (m.event as { type: string }).type;
    if (!writtenSeqs.has(m.seq)) others[type] = (others[type] ?? 0) + 1;
  }
  const [atCursor] = await restEvents(tether.base, user, id, cursor - 1);
  // Out of the next restart's recovery: this conversation is done.
  await http(tether.base, user, `/api/conversations/${id}/stop`, {});
  const restart = restartMs === undefined ? '' : `, restart ${fmt.ms(restartMs)} ms`;
  const during = resumed.during.length ? ` (+${fmt.int(resumed.during.length)} messages stored while it caught up: not a timing)` : '';
  return {
    ...verdict,
    missed: missed.length,
    written: seqs.length,
    during: resumed.during.length,
    others,
    ms: resumed.ms,
    syncMs: resumed.connectMs,
    probeMs: probe.ms,
    ...(restartMs !== undefined && { restartMs }),
    cpu: used,
    payloads,
    cursorEvent: [cursor, JSON.stringify(atCursor!.event)],
    summary:
      `${fmt.int(verdict.recovered)}/${fmt.int(missed.length)} missed events recovered (${fmt.int(seqs.length)} user messages), ` +
      `${verdict.gapless ? 'gapless' : `NOT gapless: ${verdict.problem}`}, caught up in ${fmt.ms(resumed.ms)} ms${during} (sync ${fmt.ms(resumed.connectMs)} ms), ` +
      `live probe ${fmt.ms(probe.ms)} ms${restart} (${describeCpu(used)})`,
  };
}
