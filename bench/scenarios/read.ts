// (b) Reading one conversation's whole log: `log.read` in the host against a
// raw JetStream ordered consumer, in the bench process, on the same messages.
import { performance } from 'node:perf_hooks';
import { foldEvents } from '../../machines/index.ts';
import { subjectFor } from '../../src/store/index.ts';
import { rawRead } from '../baselines/rawJetStream.ts';
import { hosted, storeNames, TetherHost } from '../harness/host.ts';
import { fmt } from '../harness/measure.ts';
import { reps, type Ctx, type Scenario } from '../harness/scenario.ts';
import { built, compare } from './rehydrate.ts';

/** In the host: `log.read` of the whole conversation, then (`fold`) `foldEvents` of it, each timed there; all in id order. */
export async function logRead(id: string, events: number, fold: boolean) {
  const t0 = performance.now();
  const page = await hosted().stores.log.read(id);
  const t1 = performance.now();
  const folded = fold ? foldEvents(page.items).folded : events;
  const t2 = performance.now();
  if (page.hasMore || folded !== events || page.items.length !== events || page.items.some((x, i) => x.event.id !== i))
    throw new Error(`log.read gave ${page.items.length} events (more: ${page.hasMore}), ${folded} folded`);
  return [t1 - t0, t2 - t1];
}

export const readLog = (host: TetherHost, id: string, events: number, fold = false) =>
  host.proc.call(import.meta.url, logRead, [id, events, fold]);

/** The raw read (`rawRead`) of a subject's messages, checked: all `events` of them. */
export const countedRead = (ctx: Ctx, stream: string, subject: string, events: number) => async () => {
  const r = await rawRead(ctx.nc, stream, subject);
  if (r.count !== events) throw new Error(`the raw read got ${r.count} messages, not ${events}`);
  return r.ms;
};

export const read: Scenario = {
  name: 'read',
  setup:
    'a Tether host (createTether() in its own process: JetStream log, KV stores, scripted agent, in-memory runtime); two conversations of 10,000 events each written through it at once (so their events interleave in one stream), a chat round at a time (user message, `running`, agent reply, `awaiting_user_input`), then passivated.',
  load: "(b) the first conversation's whole log through `log.read(id)`, timed in the host process. 2 warm-up and 9 rounds of Tether and raw once each, the order alternating; medians.",
  baseline:
    "what a program following the subject writes with nats.js v3, in the bench process on its own connection: an ordered consumer on the conversation's subject (pulls bounded to 8 MiB), consumed until nothing is pending, each message JSON-parsed.",
  checks:
    '`log.read` gives all 10,000 events in id order and no further page; the raw read gets 10,000 messages; each conversation ends passivated with its snapshot at its last seq.',
  quick: 'two 2,000-event conversations; 3 rounds, no warm-up.',
  async run(ctx) {
    const tag = ctx.tag('b');
    const host = await TetherHost.start(ctx, { tag });
    try {
      const [c] = await Promise.all([built(ctx, host, 'reader'), built(ctx, host, 'other')]);
      const { stream, subjectPrefix } = storeNames(tag);
      const { Tether, raw } = await compare(ctx, '(b)', reps(ctx, { warmups: 0, runs: 3 }, { warmups: 2, runs: 9 }), {
        Tether: async () => (await readLog(host, c.id, c.events))[0]!,
        raw: countedRead(ctx, stream, subjectFor(subjectPrefix, c.id), c.events),
      });
      return [
        {
          id: 'b',
          what: `read: ${fmt.int(c.events)} events of one conversation, \`log.read\` vs raw ordered consumer (pulls bounded to 8 MiB) + JSON.parse`,
          tether: Tether,
          baseline: raw,
          target: { op: '≤', value: 1.5 },
        },
      ];
    } finally {
      await host.stop(ctx.nc);
    }
  },
};
