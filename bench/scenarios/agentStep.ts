// (i) Agent step: the host's CPU per agent step in a 10,000-event conversation vs a
// 1,000-event one, both live in the same host: the work per step must not grow with the log.
import { CreateConversationBody, type LoggedEvent } from '../../protocol/index.ts';
import { hosted, TetherHost } from '../harness/host.ts';
import { fmt, median, progress, timed, until } from '../harness/measure.ts';
import { repeat, reps, type Scenario } from '../harness/scenario.ts';

const USER = 'agent-step-user';
const [FULL_SHORT, FULL_LONG] = [1_000, 10_000];
const ROUNDS = 6;
const STEPS = 2 * ROUNDS; // per round: the command, then the summary of its output

// In the host: the conversations built (short, long), each with the id of its last `awaiting_user_input` fact.
type Conv = { id: string; last: number; wake: () => void };
const built: Conv[] = [];
let sent = 0;
/** One round: a user `!cat file-N`; resolves once the agent has run it, summarised it and awaits input again. */
async function round(c: Conv): Promise<void> {
  const before = c.last;
  const done = new Promise<void>((resolve) => (c.wake = () => c.last > before && resolve()));
  await hosted().tether.host.commands.act(c.id, USER, { type: 'message', content: `!cat file-${sent++}` });
  await done;
}
/** In the host: conversation k, written one round at a time until it holds `events` events. */
export async function build(k: number, events: number): Promise<void> {
  const { host } = hosted().tether;
  const body = CreateConversationBody.parse({ max_iterations: 10_000 });
  const c: Conv = { id: (await host.commands.create(USER, body)).conversation_id, last: -1, wake: () => {} };
  const idle = ({ event: e }: LoggedEvent) => {
    if (e.type !== 'agent_state_changed' || e.data.state !== 'awaiting_user_input') return;
    c.last = e.id;
    c.wake();
  };
  await host.feed.listen(c.id, 0, { event: idle }).caughtUp;
  await until(`start-up of ${c.id}`, async () => (c.last >= 0 ? true : undefined), 60_000, 5);
  for (let shown = 0; c.last + 1 < events;) {
    await round(c);
    if (c.last + 1 >= shown + 2_000)
      progress(`agent step: ${fmt.int((shown = c.last + 1))} of ${fmt.int(events)} events`);
  }
  built[k] = c;
}
/** In the host: CPU ms of this process per agent step over ROUNDS rounds on each conversation, in this order. */
export async function perStep(order: number[]): Promise<number[]> {
  const ms: number[] = [];
  for (const k of order) {
    const t0 = process.cpuUsage();
    for (let i = 0; i < ROUNDS; i++) await round(built[k]!);
    const used = process.cpuUsage(t0);
    ms[k] = (used.user + used.system) / 1000 / STEPS;
  }
  return ms;
}
/** In the host: conversation k's stored events and MiB of event JSON. */
export async function size(k: number): Promise<string> {
  const { items } = await hosted().stores.log.read(built[k]!.id);
  const mib = fmt.mib(items.reduce((n, i) => n + JSON.stringify(i.event).length, 0));
  return `${fmt.int(items.length)} events (${mib} MiB of event JSON)`;
}

export const agentStep: Scenario = {
  name: 'agentstep',
  setup: `a Tether host (JetStream log, KV stores, scripted agent, \`cat\` runtime: every command prints 16 lines of 64 characters) holding two live conversations of ${fmt.int(FULL_SHORT)} and ${fmt.int(FULL_LONG)} events, each written by it one round at a time: a user message \`!cat file-N\`, the agent runs it (step 1), summarises its output (step 2) and awaits input; about 6 events and 2.6 KiB of event JSON per round.`,
  load: `a run is ${ROUNDS} rounds on each conversation (the order turning every run), driven inside the host through \`commands.act\`, timed by \`process.cpuUsage()\` of the host process (Tether and its NATS client; nats-server apart) around each side's rounds, divided by its ${STEPS} agent steps. 1 warm-up + 7 runs, median.`,
  baseline: `the same rounds on the ${fmt.int(FULL_SHORT)}-event conversation, in the same host and the same runs.`,
  checks:
    'every round ends with a new `awaiting_user_input` fact (the agent ran the command and answered); runs with other processes over 20% of a core are run again.',
  quick: 'conversations of 300 and 3,000 events; no warm-up, 3 runs.',
  async run(ctx) {
    const host = await TetherHost.start(ctx, { tag: ctx.tag('i'), runtime: 'cat' });
    const [SHORT, LONG] = ctx.quick ? [300, 3_000] : [FULL_SHORT, FULL_LONG];
    try {
      progress(`agent step: building conversations of ${fmt.int(SHORT)} and ${fmt.int(LONG)} events`);
      await Promise.all([SHORT, LONG].map((n, k) => host.proc.call(import.meta.url, build, [k, n], 600_000)));
      const sizes = () => Promise.all([0, 1].map((k) => host.proc.call(import.meta.url, size, [k])));
      const before = await sizes();
      const r = reps(ctx, { warmups: 0, runs: 3 }, { warmups: 1, runs: 7 });
      const runs = await repeat(ctx, '(i)', r, async (i) => {
        const t = await timed(() => host.proc.call(import.meta.url, perStep, [i % 2 ? [1, 0] : [0, 1]]));
        const [short, long] = t.value as [number, number];
        const summary = `${fmt.int(SHORT)} events ${short.toFixed(2)} ms/step; ${fmt.int(LONG)} events ${long.toFixed(2)} ms/step`;
        return { short, long, use: [t], summary };
      });
      const after = await sizes();
      const at = (k: number) => `${before[k]} before the first run, ${after[k]} after the last`;
      ctx.note(`(i) short: ${at(0)}; long: ${at(1)}.`);
      const [short, long] = [median(runs.map((x) => x.short)), median(runs.map((x) => x.long))];
      return [
        {
          id: 'i',
          what: `agent step: host CPU time per agent step (scripted agent, a command round: run, then summarise), a ${fmt.int(LONG)}-event conversation vs a ${fmt.int(SHORT)}-event one, live in the same host (median)`,
          tether: { value: long, text: `${long.toFixed(2)} ms/step` },
          baseline: { value: short, text: `${short.toFixed(2)} ms/step` },
          target: { op: '≤', value: 1.5 },
        },
      ];
    } finally {
      await host.stop(ctx.nc);
    }
  },
};
