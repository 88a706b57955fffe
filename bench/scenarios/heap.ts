// (e, e2) Heap of a Tether host, 10,000 sessions live then passivated; the functions run in the host (density's too).
import pLimit from 'p-limit';
import { createActor } from 'xstate';
import { inputFrom, sessionMachine } from '../../machines/index.ts';
import { CreateConversationBody, type PassivationReason } from '../../protocol/index.ts';
import type { ClientSpec } from '../harness/fleet.ts';
import { hosted, TetherHost } from '../harness/host.ts';
import { describeUse, fmt, memory, timed, until } from '../harness/measure.ts';
import type { Scenario } from '../harness/scenario.ts';

const HERE = import.meta.url;
export const LONG = 300_000;
const limit = pLimit(200);
export const mib = (bytes: number) => `${fmt.mib(bytes)} MiB`;
export const kib = (bytes: number) => `${fmt.kib(bytes)} KiB`;
export function inHost(host: TetherHost) {
  return <A extends unknown[], R>(fn: (...a: A) => R, ...args: A) => host.proc.call(HERE, fn, args, LONG);
}

/** `count` conversations of users u<first + index>, 200 at a time, each started (awaiting input); a client spec each. */
export async function createSessions(count: number, first: number, ws = ''): Promise<ClientSpec[]> {
  const { host } = hosted().tether;
  const start = async (index: number) => {
    const user = `u${first + index}`;
    const { conversation_id: conversationId } = await host.commands.create(user, CreateConversationBody.parse({}));
    const afterSeq = await until(`start of ${conversationId}`, () =>
      host.session(conversationId, user).then((s) => (s.state === 'awaiting_user_input' ? s.lastSeq : undefined)),
    );
    return { ws, user, conversationId, afterSeq, index, sends: true };
  };
  return Promise.all(Array.from({ length: count }, (_, i) => limit(() => start(i))));
}

export async function passivateSessions(specs: ClientSpec[], reason: PassivationReason): Promise<void> {
  await Promise.all(specs.map((s) => limit(() => hosted().tether.host.passivate(s.conversationId, reason))));
}

export async function hostState() {
  const { tether } = hosted();
  return { ...(await memory()), live: tether.host.liveCount, connections: tether.server.ws.clientCount };
}

/** Heap per bare actor of the (shared) session machine, 1,000 kept at once. */
export async function references() {
  const input = inputFrom({ ts: '', conversation_id: 'r', data: { user: 'u', max_iterations: 100 } } as never);
  const each = async (make: () => unknown) => {
    const [before, kept] = [(await memory()).heap, Array.from({ length: 1_000 }, make)];
    return ((await memory()).heap - before) / kept.length;
  };
  return { actor: await each(() => createActor(sessionMachine, { input }).start()) };
}

export const heap: Scenario = {
  name: 'heap',
  setup:
    'a Tether host started with --expose-gc (JetStream log and KV stores, scripted agent, in-memory runtimes kept in no list, default limits): nothing else of the bench is on its heap.',
  load: "in the host, heapUsed after full GCs (until it stops shrinking): empty; with N = 10,000 conversations created and started (200 at a time, one user each, all awaiting input); after `host.passivate(id, 'close_delay')` of each (200 at a time). Once.",
  baseline:
    "the empty host's heap; for (e2)'s bound, a bare actor of the session machine (`createActor(sessionMachine)`, 1,000 kept at once) in the same process.",
  checks: 'each conversation awaits input before the live reading; (e2) misses its target unless liveCount is 0.',
  quick: 'N = 1,000.',
  async run(ctx) {
    const n = ctx.quick ? 1_000 : 10_000;
    const count = fmt.int(n);
    const host = await TetherHost.start(ctx, { tag: ctx.tag('e') }, { gc: true });
    const call = inHost(host);
    try {
      const empty = await call(hostState);
      const made = await timed(() => call(createSessions, n, 0));
      const live = await call(hostState);
      const slept = await timed(() => call(passivateSessions, made.value, 'close_delay'));
      const after = await call(hostState);
      const ref = await call(references);
      const [perLive, perPassivated] = [live, after].map((m) => (m.heap - empty.heap) / n) as [number, number];
      ctx.log(
        `empty ${mib(empty.heap)}; live ${mib(live.heap)} (liveCount ${fmt.int(live.live)}); passivated ${mib(after.heap)} (liveCount ${after.live}); created and started in ${fmt.ms(made.ms)} ms (${describeUse(made)}), passivated in ${fmt.ms(slept.ms)} ms (${describeUse(slept)})`,
      );
      ctx.note(
        `Heap per session: ${kib(perLive)} live, ${kib(perPassivated)} passivated; in the same process a bare actor of the session machine takes ${kib(ref.actor)}. The passivated figure is growth over the empty host, so it also counts what live sessions left in tables V8 does not shrink (xstate's WeakMaps): an upper bound.`,
      );
      const baseline = { value: empty.heap, text: mib(empty.heap) };
      const fig = (m: typeof live, per: number) => ({ value: m.heap, text: `${mib(m.heap)} (${kib(per)}/session)` });
      const text = `${fig(after, perPassivated).text}, liveCount ${after.live}`;
      const bound = Number(fmt.kib(ref.actor / 2));
      return [
        { id: 'e', what: `heap with ${count} live sessions vs the empty host`, tether: fig(live, perLive), baseline },
        {
          id: 'e2',
          what: `heap with the same ${count} sessions passivated vs the empty host: no actor in memory`,
          tether: { value: after.live ? Infinity : perPassivated / 1024, unit: 'KiB/session', text },
          baseline,
          ratio: after.heap / empty.heap,
          target: { op: '<', value: bound, of: 'tether', say: '(half a bare actor), liveCount 0' },
        },
      ];
    } finally {
      await host.stop(ctx.nc);
    }
  },
};
