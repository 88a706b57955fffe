// (a) The append path: stored events per second through the whole Tether
// server (ws in, JetStream append, fold, ws out) against raw JetStream async
// publishing of the same payloads to the same number of subjects. The ws
// clients run in a process of their own (clientFleet.ts), as real clients do.
import { performance } from 'node:perf_hooks';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { memoryRuntimeProvider } from '../src/runtime/memoryRuntime.ts';
import { createTether } from '../src/tether.ts';
import { ensureEventStream, subjectFor, type NatsConnection } from '../src/store/index.ts';
import { benchAuthenticate, http, USER_PARAM } from './benchHttp.ts';
import { benchStores } from './benchStores.ts';
import type { ClientFleet, ClientSpec, PacedTiming } from './clientFleet.ts';
import { cpuMeter, describeCpu, fmt, within, type CpuUse } from './measure.ts';
import { restEvents, settledSeq, verifyFrames, type GetJson } from './storedEvents.ts';

export interface AppendPlan {
  conversations: number;
  messagesPerConversation: number;
  /** User messages each sending client keeps in flight. */
  window: number;
  /** ws clients per conversation: one sends, the others only watch (fan-out). */
  clientsPerConversation: number;
  /**
   * User actions only: the agent thinks (for minutes) after the first message,
   * so every further user message is stored and delivered as one event and
   * nothing else is produced. A client is done when its messages are back.
   */
  userActionsOnly?: boolean;
  /**
   * Open loop instead of a window (user actions only): the senders send on a
   * fixed schedule, this many messages a second in all, and the run measures
   * each message's latency to the last client of its conversation.
   */
  pacedPerSecond?: number;
  timeoutMs: number;
}

/** Wraps the timed phase only (e.g. a CPU profiler); set-up and checks stay outside. */
export type AroundTimed = <T>(work: () => Promise<T>) => Promise<T>;

export interface AppendRun {
  events: number;
  /** Event frames the clients received (events × clients per conversation). */
  frames: number;
  ms: number;
  perSecond: number;
  cpu: CpuUse;
  /** Stored event JSON per conversation, in order: the baseline publishes exactly these. */
  payloads: string[][];
  /** Per-message latencies of a paced run. */
  paced?: PacedTiming;
  summary: string;
}

// One user per conversation, as in production: the per-user running limit stays at its default.
const userOf = (i: number) => `u${i}`;

/** REST reads as the i-th conversation's user. */
const getAs =
  (base: string, i: number): GetJson =>
  (path) =>
    http(base, userOf(i), path);

/** One measured run of the Tether server on fresh stream and bucket names, its clients in `fleet`'s process. */
export async function tetherAppendRun(
  nc: NatsConnection,
  natsPid: number,
  fleet: ClientFleet,
  plan: AppendPlan,
  tag: string,
  around: AroundTimed = (work) => work(),
): Promise<AppendRun> {
  const { stores, dispose } = await benchStores(nc, 'append', tag);
  const tether = createTether({
    stores,
    runtimes: memoryRuntimeProvider(),
    agent: plan.userActionsOnly ? scriptedAgent({ delayMs: 10 * 60_000 }) : scriptedAgent(),
    logger: silentLogger,
    server: { authenticate: benchAuthenticate },
  });
  const address = await tether.listen(0, '127.0.0.1');
  const base = `http://127.0.0.1:${address.port}`;
  try {
    const deadline = performance.now() + plan.timeoutMs;
    const ids = await within(
      plan.timeoutMs,
      'creating conversations',
      Promise.all(
        Array.from({ length: plan.conversations }, (_, i) =>
          http<{ conversation_id: string }>(base, userOf(i), '/api/conversations', { max_iterations: 10_000 }).then(
            (r) => r.conversation_id,
          ),
        ),
      ),
    );
    const cursors = await within(
      plan.timeoutMs,
      'conversation start-up',
      Promise.all(ids.map((id, i) => settledSeq(getAs(base, i), id, deadline))),
    );
    const specs: ClientSpec[] = ids.flatMap((conversationId, i) =>
      Array.from({ length: plan.clientsPerConversation }, (_, k) => ({
        auth: `${USER_PARAM}=${userOf(i)}`,
        conversationId,
        afterSeq: cursors[i]!,
        index: i,
        sends: k === 0,
      })),
    );
    await within(plan.timeoutMs, 'connecting clients', fleet.connect(`ws://127.0.0.1:${address.port}`, specs));

    const cpu = cpuMeter(natsPid, fleet.pid);
    const { ms, paced } = await around(() => within(plan.timeoutMs, 'the append run', timedPhase(fleet, plan)));
    const used = cpu();
    const received = await within(plan.timeoutMs, 'collecting the frames', fleet.frames());

    const payloads: string[][] = [];
    let events = 0;
    const logs = await within(
      plan.timeoutMs,
      'reading the logs',
      Promise.all(ids.map((id, i) => restEvents(getAs(base, i), id, cursors[i]!))),
    );
    for (const [i, id] of ids.entries()) {
      const stored = logs[i]!;
      for (const [k, spec] of specs.entries()) if (spec.conversationId === id) verifyFrames(id, stored, received[k]!);
      events += stored.length;
      payloads.push(stored.map((item) => JSON.stringify(item.event)));
    }
    const perSecond = (events / ms) * 1000;
    return {
      events,
      frames: received.reduce((n, frames) => n + frames.length, 0),
      ms,
      perSecond,
      cpu: used,
      payloads,
      paced,
      summary: `${fmt.int(events)} events in ${fmt.ms(ms)} ms = ${fmt.int(perSecond)} events/s${paced ? ` (paced at ${fmt.int(plan.pacedPerSecond!)} messages/s)` : ''} (${describeCpu(used)})`,
    };
  } finally {
    await fleet.close().catch(() => undefined);
    await tether.close();
    await dispose();
  }
}

async function timedPhase(fleet: ClientFleet, plan: AppendPlan): Promise<{ ms: number; paced?: PacedTiming }> {
  if (plan.pacedPerSecond === undefined)
    return { ms: await fleet.run(plan.messagesPerConversation, plan.window, !plan.userActionsOnly) };
  if (!plan.userActionsOnly) throw new Error('a paced run sends user actions only');
  const paced = await fleet.paced(plan.messagesPerConversation, plan.pacedPerSecond);
  return { ms: paced.ms, paced };
}

export interface RawPublishRun {
  events: number;
  ms: number;
  perSecond: number;
  cpu: CpuUse;
  summary: string;
}

/**
 * The baseline: the same payloads, published without awaiting each ack to one
 * subject per conversation of a fresh stream with the event stream's settings,
 * then every ack awaited. Conversations are interleaved as they are in the run.
 */
export async function rawPublishRun(
  nc: NatsConnection,
  natsPid: number,
  payloads: string[][],
  tag: string,
  timeoutMs: number,
): Promise<RawPublishRun> {
  const stream = `BENCH_RAW_${tag}`;
  const prefix = `bench.raw${tag}`;
  const jsm = await jetstreamManager(nc);
  await ensureEventStream(jsm, { stream, subjectPrefix: prefix });
  const js = jetstream(nc);
  const subjects = payloads.map((_, i) => subjectFor(prefix, `c${i}`));
  const longest = Math.max(...payloads.map((p) => p.length));
  try {
    const cpu = cpuMeter(natsPid);
    const t0 = performance.now();
    const acks: Array<Promise<unknown>> = [];
    for (let n = 0; n < longest; n++) {
      for (const [i, list] of payloads.entries()) {
        const payload = list[n];
        if (payload !== undefined) acks.push(js.publish(subjects[i]!, payload));
      }
    }
    await within(timeoutMs, 'raw publish acks', Promise.all(acks));
    const ms = performance.now() - t0;
    const used = cpu();
    const info = await jsm.streams.info(stream);
    if (info.state.messages !== acks.length)
      throw new Error(`raw stream holds ${info.state.messages} messages, ${acks.length} were published`);
    const perSecond = (acks.length / ms) * 1000;
    return {
      events: acks.length,
      ms,
      perSecond,
      cpu: used,
      summary: `${fmt.int(acks.length)} messages in ${fmt.ms(ms)} ms = ${fmt.int(perSecond)} msgs/s (${describeCpu(used)})`,
    };
  } finally {
    await jsm.streams.delete(stream).catch(() => false);
  }
}
