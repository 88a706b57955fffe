// (a, a1) The append path: user actions over ws → stored → delivered back,
// against raw JetStream async publish of the same payloads. `appendRun` is
// also the Tether side of the fan-out (a2, a3) and latency (a4, a5) scenarios.
import { rawPublish } from '../baselines/rawJetStream.ts';
import { close, connect, frames, paced, run, Fleet, type ClientSpec, type Paced } from '../harness/fleet.ts';
import { checkFrames, startedConversation, thinkingConversation, TetherHost } from '../harness/host.ts';
import { describeUse, fmt, median, timed } from '../harness/measure.ts';
import { per, repeat, reps, type Ctx, type Row, type Scenario } from '../harness/scenario.ts';

export interface AppendPlan {
  conversations: number;
  messages: number;
  /** User messages each sender keeps in flight (closed loop). */
  window: number;
  /** ws clients per conversation: the first sends, all receive. */
  clients: number;
  /** Whole turns: done when the agent left `running` after the last message. */
  settle: boolean;
  /** Open loop at this many messages a second in all, instead of the window. */
  perSecond?: number;
  /**
   * The agent already thinking when timing starts: a first message of each
   * conversation is sent, and its events stored, before the clients connect,
   * so that every timed message is one event (the first starts an agent step).
   */
  thinking?: boolean;
}

let conversationsMade = 0;

/** One run on `host`: fresh conversations (one user each), their clients in the fleet, every frame checked against REST. */
export async function appendRun(host: TetherHost, fleet: Fleet, plan: AppendPlan) {
  const users = Array.from({ length: plan.conversations }, () => `u${conversationsMade++}`);
  const started = await Promise.all(
    users.map(async (u) => {
      const conversation = await startedConversation(host.base, u, { max_iterations: 10_000 });
      return plan.thinking ? thinkingConversation(host.base, u, conversation.id) : conversation;
    }),
  );
  const spec = (i: number, k: number): ClientSpec => {
    const { id, seq } = started[i]!;
    return { ws: host.ws, user: users[i]!, conversationId: id, afterSeq: seq, index: i, sends: k === 0 };
  };
  await fleet.do(
    connect,
    started.flatMap((_, i) => Array.from({ length: plan.clients }, (_, k) => spec(i, k))),
  );
  const t = await timed(async (): Promise<{ ms: number; paced?: Paced }> => {
    if (plan.perSecond === undefined) return { ms: await fleet.do(run, plan.messages, plan.window, plan.settle) };
    const p = await fleet.do(paced, plan.messages, plan.perSecond);
    return { ms: p.ms, paced: p };
  });
  const got = await fleet.do(frames);
  await fleet.do(close);
  const payloads = await Promise.all(
    started.map(({ id, seq }, i) =>
      checkFrames(host.base, users[i]!, id, seq, got.slice(i * plan.clients, (i + 1) * plan.clients)),
    ),
  );
  const events = payloads.reduce((n, p) => n + p.length, 0);
  const perSecond = (events / t.value.ms) * 1000;
  return {
    events,
    ms: t.value.ms,
    perSecond,
    payloads,
    paced: t.value.paced,
    use: [t],
    summary: `${fmt.int(events)} events in ${fmt.ms(t.value.ms)} ms = ${fmt.int(perSecond)} events/s`,
  };
}

/** Tether's run and raw publish of its stored payloads, back to back. */
export async function pairedWithRaw(ctx: Ctx, host: TetherHost, fleet: Fleet, plan: AppendPlan, i: number) {
  const tether = await appendRun(host, fleet, plan);
  const raw = await rawPublish(ctx.nc, tether.payloads, ctx.tag(`raw${i}`));
  const rawPerSecond = (raw.value / raw.ms) * 1000;
  return {
    tether,
    rawPerSecond,
    use: [...tether.use, raw],
    summary: `Tether ${tether.summary}; raw ${fmt.int(raw.value)} msgs in ${fmt.ms(raw.ms)} ms = ${fmt.int(rawPerSecond)} msgs/s (${describeUse(raw)})`,
  };
}

const CONVERSATIONS = 100;

export const append: Scenario = {
  name: 'append',
  setup: `a Tether host (createTether() in its own process: JetStream log, KV stores, scripted agent, in-memory runtime) and the client fleet; per run ${CONVERSATIONS} fresh conversations, one user and one ws client each, started (awaiting input) before anything is timed.`,
  load: '(a) user actions: the agent thinks for 10 minutes after the first message, so each further message is stored and delivered back as one event; 160 messages per client, at most 8 in flight. (a1) whole turns: the scripted agent answers each message (state facts, its reply); 40 messages per client, at most 8 in flight. Timed in the fleet process from the first send to the last client having everything its messages caused. 3 (a) and 1 (a1) warm-up runs, then 5 of each, median.',
  baseline:
    "the stored events of each Tether run (same count, same bytes) published raw with `js.publish` without awaiting each, to one subject per conversation of a fresh stream with the event stream's settings, then every ack awaited, on the bench's own NATS connection.",
  checks:
    "each client checks that every user message it gets is its conversation's next one (by content); afterwards every client's frames are compared with the REST events list (same seqs, order and JSON, none missing or extra); the raw stream holds every message published.",
  quick: '20 (a) and 5 (a1) messages per client, 5 in flight, one run each, no warm-up.',
  async run(ctx) {
    const fleet = new Fleet();
    const rows: Row[] = [];
    try {
      for (const [id, agent, settle] of [
        ['a', 'thinking', false],
        ['a1', 'scripted', true],
      ] as const) {
        const host = await TetherHost.start(ctx, { tag: ctx.tag(id), agent });
        try {
          const messages = (ctx.quick ? 5 : 40) * (id === 'a' ? 4 : 1);
          const plan: AppendPlan = {
            conversations: CONVERSATIONS,
            messages,
            window: ctx.quick ? 5 : 8,
            clients: 1,
            settle,
          };
          const r = reps(ctx, { warmups: 0, runs: 1 }, { warmups: id === 'a' ? 3 : 1, runs: 5 });
          const runs = await repeat(ctx, `(${id})`, r, (i) => pairedWithRaw(ctx, host, fleet, plan, i));
          const tether = median(runs.map((x) => x.tether.perSecond));
          const raw = median(runs.map((x) => x.rawPerSecond));
          const cpu = (name: string) =>
            fmt.int(median(runs.map((x) => (x.tether.use[0]!.cpu[name] ?? 0) / x.tether.events)) * 1000);
          ctx.note(
            `(${id}) CPU per stored event (median, µs): host ${cpu('host')}, nats-server ${cpu('nats-server')}, fleet ${cpu('fleet')}.`,
          );
          rows.push({
            id,
            what:
              id === 'a'
                ? `append: user actions over ws → stored → delivered back, ${CONVERSATIONS} conversations, stored events/s vs raw JetStream async publish of the same payloads`
                : `whole conversation turns: each user message and everything it causes, ${CONVERSATIONS} conversations, stored events/s vs raw JetStream async publish`,
            tether: per(tether, 'events/s'),
            baseline: per(raw, 'msgs/s'),
            target: id === 'a' ? { op: '≥', value: 0.5 } : undefined,
          });
        } finally {
          await host.stop(ctx.nc);
        }
      }
      return rows;
    } finally {
      await fleet.stop();
    }
  },
};
