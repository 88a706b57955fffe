// (h, h2) Cold start with local runtimes, via the host's commands and via HTTP + ws, vs a bare bash.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { CreateConversationBody, type LoggedEvent } from '../../protocol/index.ts';
import { bareBash } from '../baselines/bareBash.ts';
import { TetherMember } from '../harness/fleet.ts';
import { hosted, rest, TetherHost } from '../harness/host.ts';
import { busy, fmt, median, percentile, timed, within } from '../harness/measure.ts';
import { msFigure, type Scenario } from '../harness/scenario.ts';

const USER = 'cold';
const ORDERS = ['012', '021', '102', '120', '201', '210'];
const newId = () => randomUUID().replaceAll('-', '');
const isIdle = (e: LoggedEvent['event']) => e.type === 'agent_state_changed' && e.data.state === 'awaiting_user_input';
const stat = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ').at(-1)!.split(' ').map(Number);
/** CPU ms of the bench's and the host's reaped children (the bashes), which `timed()` counts as other processes. */
const reaped = (host: number) => [process.pid, host].reduce((n, p) => n + (stat(p)[13]! + stat(p)[14]!) * 10, 0);
const WHAT = {
  h: 'cold start: `commands.create()` → `awaiting_user_input` stored, local runtime (a bash per conversation), JetStream log + KV stores',
  h2: 'cold start through the API: `POST /api/conversations` → a ws client receives the stored `awaiting_user_input` event',
};
const figure = (ms: number[]) => msFigure(median(ms), ` (p99 ${fmt.ms(percentile(ms, 99))} ms)`);
type Start = { id: string; ms: number; createdMs: number };
type Round = Record<'bash' | 'h' | 'h2' | 'created' | 'posted', number>; // ms
/** In the host, (h): listening to a new id, then from `commands.create` until its `awaiting_user_input` is stored and create resolved. */
export async function managerStart(id: string): Promise<Start> {
  const { host } = hosted().tether;
  hosted().nextId = id;
  let t0 = 0;
  let idle!: (ms: number) => void;
  const reached = new Promise<number>((resolve) => (idle = resolve));
  const listening = host.feed.listen(id, 0, { event: ({ event }) => isIdle(event) && idle(performance.now() - t0) });
  await listening.caughtUp;
  t0 = performance.now();
  const created = await host.commands.create(USER, CreateConversationBody.parse({}));
  const createdMs = performance.now() - t0;
  const idleAt = await within(30_000, `cold start of ${id}`, reached).finally(() => listening.stop());
  const { state, snapshot } = await host.session(id, USER);
  if (created.conversation_id !== id || state !== 'awaiting_user_input' || snapshot?.context.runtime !== 'connected')
    throw new Error(`cold start of ${created.conversation_id}: ${state}, runtime ${snapshot?.context.runtime}`);
  return { id, ms: Math.max(idleAt, createdMs), createdMs };
}
export const setNextId = async (id: string) => void (hosted().nextId = id);
/** In the host: passivates the sessions (bash killed, workspace kept); none may stay live. */
export async function closeStarts(ids: string[]): Promise<void> {
  const { host } = hosted().tether;
  for (const id of ids) await host.passivate(id, 'close_delay');
  if (ids.some((id) => host.isLive(id))) throw new Error(`${ids.join(', ')} still live after passivation`);
}
const hostStart = (host: TetherHost) => host.proc.call(import.meta.url, managerStart, [newId()]);
/** (h2): POST from the bench, then a protocol-client ws until the stored `awaiting_user_input` frame. */
async function httpStart(host: TetherHost): Promise<Start> {
  await host.proc.call(import.meta.url, setNextId, [newId()]);
  const t0 = performance.now();
  const { conversation_id: id } = await rest<{ conversation_id: string }>(host.base, USER, '/api/conversations', {});
  const createdMs = performance.now() - t0;
  let m!: TetherMember;
  const idle = new Promise<number>((resolve, reject) => {
    const spec = { ws: host.ws, user: USER, conversationId: id, afterSeq: 0, index: 0, sends: false };
    m = new TetherMember(spec, (err) => err && reject(err));
    m.onFrame = () => m.settled.state === 'awaiting_user_input' && resolve(performance.now() - t0);
  });
  const ms = await within(30_000, `cold start of ${id} over HTTP + ws`, idle).finally(() => m.close());
  return { id, ms, createdMs };
}

export const coldStart: Scenario = {
  name: 'coldstart',
  setup:
    'a Tether host with local runtimes (a real bash per conversation, workspaces in a temporary folder removed afterwards), JetStream log + KV stores, scripted agent; ids picked by the bench (`newId`), so a conversation can be listened to before it is created.',
  load: 'rounds of one bare bash, one (h) and one (h2) start, in another of the six orders each round. (h) in the host: `feed.listen` on the new id, then `commands.create(user, {})` until the `awaiting_user_input` state fact is published and create resolved. (h2) from the bench: `POST /api/conversations` `{}`, then a protocol-client ws on the whole history until it receives the stored `awaiting_user_input` frame. After each round both sessions are passivated, untimed. 5 warm-up + 200 rounds; median and nearest-rank p99.',
  baseline:
    "`spawn('bash', ['--noprofile', '--norc'])` in the bench process, write `echo ready`, until `ready` comes back on stdout (the floor of a local runtime's start); killed afterwards, untimed.",
  checks:
    "(h): create answers the bench's id, and the session ends `awaiting_user_input` with its runtime `connected`; no session is live after its passivation; at the end no child process (bash) of the host still runs. Busy rounds (other processes, not counting the bashes, over 20% of a core) are kept and counted: a p99 needs them all.",
  quick: '2 warm-up + 20 rounds.',
  async run(ctx) {
    const workspaces = mkdtempSync(join(tmpdir(), 'tether-bench-cold-'));
    const host = await TetherHost.start(ctx, { tag: ctx.tag('h'), runtime: 'local', workspaces, fixedIds: true });
    try {
      const [warmups, rounds] = ctx.quick ? [2, 20] : [5, 200];
      const sides = [() => bareBash(workspaces), () => hostStart(host), () => httpStart(host)] as const;
      const kept: Round[] = [];
      let noisy = 0;
      for (let i = 0; i < warmups + rounds; i++) {
        const children0 = reaped(host.proc.pid);
        const t = await timed(async () => {
          const r: Array<number | Start> = [];
          for (const k of ORDERS[i % ORDERS.length]!) r[+k] = await sides[+k as 0 | 1 | 2]();
          const [b, m, h] = r as [number, Start, Start];
          await host.proc.call(import.meta.url, closeStarts, [[m.id, h.id]]);
          return { bash: b, h: m.ms, h2: h.ms, created: m.createdMs, posted: h.createdMs };
        });
        if (i < warmups) continue;
        kept.push(t.value);
        if (busy({ ms: t.ms, otherMs: t.otherMs - reaped(host.proc.pid) + children0 })) noisy++;
      }
      const left = readFileSync(`/proc/${host.proc.pid}/task/${host.proc.pid}/children`, 'utf8').trim();
      if (left) throw new Error(`processes ${left} of the host still run after every session was passivated`);
      const col = (k: keyof Round) => kept.map((r) => r[k]);
      ctx.log((['h', 'h2', 'bash'] as const).map((k) => `${k} ms: ${col(k).map(fmt.ms).join(', ')}`).join('; '));
      ctx.note(
        `Median: (h) \`create()\` resolved at ${fmt.ms(median(col('created')))} ms; (h2) the POST answered at ${fmt.ms(median(col('posted')))} ms. ${noisy} of ${rounds} rounds had other processes (the bashes apart) over 20% of a core; all kept.`,
      );
      return (['h', 'h2'] as const).map((id) => ({
        id,
        what: `${WHAT[id]}, ${rounds} starts, median (p99) vs spawning a bare bash and reading its answer to one \`echo\``,
        tether: figure(col(id)),
        baseline: figure(col('bash')),
        target: { op: '<', value: 100, of: 'tether', say: 'ms median' },
      }));
    } finally {
      await host.stop(ctx.nc);
      rmSync(workspaces, { recursive: true, force: true });
    }
  },
};
