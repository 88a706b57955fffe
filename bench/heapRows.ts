// Rows (e) and (e2): the heap of one NodeHost with 10,000 live sessions,
// then with the same 10,000 passivated, against the empty manager.
import type { BenchContext } from './benchContext.ts';
import { GC_NODE_FLAGS } from './benchFiles.ts';
import { heapRun } from './heapBench.ts';
import { fmt, progress } from './measure.ts';
import type { Row } from './report.ts';

const SESSIONS = 10_000;

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const kb = (bytes: number) => `${(bytes / 1024).toFixed(bytes < 10 * 1024 ? 2 : 1)} KiB`;

export async function measureHeap(ctx: BenchContext): Promise<Row[]> {
  progress(`heap: ${fmt.int(SESSIONS)} sessions live, then passivated, in a child process`);
  // Creating 10,000 conversations on JetStream takes a while on a small machine: a generous bound.
  const r = await heapRun({ natsUrl: ctx.natsUrl, sessions: SESSIONS, tag: ctx.runId }, 10 * ctx.stepTimeoutMs);
  const perLive = (r.liveBytes - r.emptyBytes) / r.sessions;
  const perPassivated = (r.passivatedBytes - r.emptyBytes) / r.sessions;
  // "No actor in memory": a passivated conversation costs less than half of a bare actor of the session machine.
  const limit = r.bareActorBytes / 2;
  const pass = r.liveCountWhenPassivated === 0 && perPassivated < limit;
  const n = fmt.int(r.sessions);
  ctx.runs.push(
    `heap: empty manager ${mb(r.emptyBytes)}; ${n} live ${mb(r.liveBytes)} (liveCount ${fmt.int(r.liveCountWhenLive)}); ${n} passivated ${mb(r.passivatedBytes)} (liveCount ${r.liveCountWhenPassivated}); created and started in ${(r.createMs / 1000).toFixed(1)} s, passivated in ${(r.passivateMs / 1000).toFixed(1)} s`,
  );
  ctx.notes.push(
    `Heap per session: ${kb(perLive)} live, ${kb(perPassivated)} passivated. For comparison, measured in the same process: a bare actor of the session machine (\`createActor(sessionMachine)\`, shared machine) ${kb(r.bareActorBytes)}, one \`sessionMachine.provide({ actions })\` copy of the machine ${kb(r.machineCopyBytes)}; sessions share one provided machine (src/conversation/session.ts), so no session pays for such a copy.`,
    `The passivated figure is the heap's growth over the empty manager, so besides what the manager keeps per conversation (e.g. its in-memory secrets entry) it counts what ${n} live sessions left in shared structures: V8 does not shrink a WeakMap's or Map's table when its entries die (xstate memoises per state node in WeakMaps), so it is an upper bound.`,
    `Creating ${n} conversations (each: \`conversation_created\`, 4 runtime statuses, \`awaiting_user_input\`, a KV record; 200 at a time) took ${(r.createMs / 1000).toFixed(1)} s (${fmt.int((r.sessions / r.createMs) * 1000)}/s); passivating them (runtime stopped, \`session_passivated\`, KV snapshot; 200 at a time) ${(r.passivateMs / 1000).toFixed(1)} s.`,
  );
  if (!pass) {
    ctx.notes.push(
      `**Heap target missed**: liveCount ${r.liveCountWhenPassivated} after passivating all, ${kb(perPassivated)} per passivated session against < ${kb(limit)} (half a bare actor).`,
    );
  }
  ctx.settings.push(
    `Heap (e, e2): one NodeHost on the JetStream event log and KV conversation and snapshot stores (the same nats-server; fresh stream and buckets), scripted agent, in-memory runtimes (a provider that keeps no list of them), default limits, in a child process \`node ${GC_NODE_FLAGS.join(' ')} bench/heapProcess\` so that nothing else of the bench is on its heap. \`heapUsed\` after \`global.gc()\` (repeated until the heap stops shrinking): with the manager empty (baseline), with ${n} conversations created and started (all \`awaiting_user_input\`, one user each), then after \`manager.passivate(id)\` of every one. The JetStream log rather than the in-memory twin, so no stored event is on the heap.`,
  );
  return [
    {
      measurement: `(e) heap with ${n} live sessions vs the empty manager`,
      tether: `${mb(r.liveBytes)} (${kb(perLive)}/session)`,
      baseline: mb(r.emptyBytes),
      ratio: r.liveBytes / r.emptyBytes,
      target: '— (no target)',
    },
    {
      measurement: `(e2) heap with the same ${n} sessions passivated vs the empty manager: no actor in memory`,
      tether: `${mb(r.passivatedBytes)} (${kb(perPassivated)}/session), liveCount ${r.liveCountWhenPassivated}`,
      baseline: mb(r.emptyBytes),
      ratio: r.passivatedBytes / r.emptyBytes,
      target: `liveCount 0 and < ${kb(limit)}/session (half a bare actor)`,
      pass,
    },
  ];
}
