// Rows (f) to (f4): a client away while 1,000 events happen reconnects and
// catches up, after a drop and across a server restart, against Socket.IO
// connection state recovery.
import { createRequire } from 'node:module';
import type { BenchContext, Measured } from './benchContext.ts';
import { busyMachine, fmt, median, noiseNote, repeat, type Repetitions } from './measure.ts';
import { onStack, profileSection, type Bucket } from './profile.ts';
import type { ProfileSection, Row } from './report.ts';
import { ResumeClients } from './resumeClients.ts';
import { socketIoResumeRun, type SocketIoResumeRun } from './resumeSocketIo.ts';
import { tetherResumeRun, type ResumePlan, type TetherResumeRun } from './resumeTether.ts';
import { TetherHost } from './resumeTetherHost.ts';
import { benchStoreNames, deleteBenchStores } from './benchStores.ts';

const EVENTS = 1_000;
const versionOf = (pkg: string) =>
  (createRequire(import.meta.url)(`${pkg}/package.json`) as { version: string }).version;
const WRITE_WINDOW = 16;
/** Warm-ups also store this many messages while the client catches up, so the gapless check covers the seam between history and live. */
const DURING = 200;

interface Paired {
  tether: TetherResumeRun;
  sio: SocketIoResumeRun;
  summary: string;
}

const busy = (p: Paired) => busyMachine(p.tether.cpu) || busyMachine(p.sio.cpu);

const inFile = (part: string) => (stack: readonly { url: string }[]) => stack.some((f) => f.url.includes(part));
const leaf = (name: string) => (stack: readonly { functionName: string }[]) => stack[0]?.functionName === name;
/** The server's side of a resume; async continuations lose their callers, so most shares go by file, not by caller. */
const RESUME_BUCKETS: Bucket[] = [
  { label: 'decoding stored events (`toLoggedEvent`)', test: onStack('toLoggedEvent') },
  {
    label: 'history read: a JetStream consumer per page of 100 (create, fetch, delete; nats.js jetstream)',
    test: (s) => inFile('@nats-io/jetstream')(s) || onStack('readPage')(s),
  },
  {
    label: 'nats.js core (parsing replies and messages, socket I/O to nats-server)',
    test: (s) => inFile('nats-core')(s) || inFile('transport-node')(s),
  },
  {
    label: 'event frames to the client (frame bytes, `ws.send`)',
    test: onStack(/^(eventFrame|sendEvent|sendEventFrame)$/),
  },
  { label: 'ws library (upgrade, framing, writes)', test: inFile('/ws/lib/') },
  { label: 'Tether server code, rest', test: inFile('/src/') },
  { label: 'garbage collector', test: leaf('(garbage collector)') },
  { label: 'idle (the event loop waiting for I/O)', test: leaf('(idle)') },
];

export async function measureResume(ctx: BenchContext, forceProfile: boolean): Promise<Measured> {
  const reps: Record<'drop' | 'restart', Repetitions> = ctx.quick
    ? { drop: { warmups: 1, runs: 3 }, restart: { warmups: 1, runs: 2 } }
    : { drop: { warmups: 2, runs: 9 }, restart: { warmups: 1, runs: 5 } };
  const names = benchStoreNames('resume', ctx.runId);
  const clients = ResumeClients.start();
  let host: TetherHost | undefined;
  try {
    host = await TetherHost.start(ctx.natsUrl, names);
    const started = host;
    let users = 0;
    // Every resume, warm-ups and runs done again included: the gapless verdict covers them all.
    const every: Array<{ restart: boolean; run: Paired }> = [];
    const plan = (restart: boolean, during = 0): ResumePlan => ({
      events: EVENTS,
      window: WRITE_WINDOW,
      restart,
      during,
      timeoutMs: ctx.stepTimeoutMs,
    });
    const pair =
      (restart: boolean, warmups: number) =>
      async (i: number): Promise<Paired> => {
        const tether = await tetherResumeRun(
          ctx.natsPid,
          started,
          clients,
          plan(restart, i < warmups ? DURING : 0),
          `resume${users++}`,
        );
        const sio = await socketIoResumeRun(
          ctx.natsPid,
          clients,
          tether.cursorEvent,
          tether.payloads,
          restart,
          ctx.stepTimeoutMs,
        );
        const run = { tether, sio, summary: `Tether ${tether.summary}; Socket.IO ${sio.summary}` };
        every.push({ restart, run });
        return run;
      };
    const drop = await runs(ctx, 'resume after a drop', reps.drop, pair(false, reps.drop.warmups));
    const restart = await runs(ctx, 'resume across a restart', reps.restart, pair(true, reps.restart.warmups));

    const rows = [...caseRows(drop, false), ...caseRows(restart, true), verdictRow(every)];
    notes(ctx, drop, restart, every);
    const profiles: ProfileSection[] = [];
    if (forceProfile || every.some((e) => !e.run.tether.gapless)) {
      let profiled: TetherResumeRun | undefined;
      profiles.push(
        await profileSection(
          ctx.runId,
          'Resume after a drop',
          `One extra Tether resume after a drop (${fmt.int(EVENTS)} missed events) under the CPU profiler (200 µs sampling), from the client's new WebSocket to its last missed event. It covers the server's node process only: the Tether server and its NATS client; the client runs in its own process and nats-server in its own.`,
          RESUME_BUCKETS,
          async (around) =>
            (profiled = await tetherResumeRun(ctx.natsPid, started, clients, plan(false), `resume${users++}`, around)),
        ),
      );
      if (profiled && !profiled.gapless)
        ctx.notes.push(`**The profiled resume was not gapless either**: ${profiled.problem}.`);
    }
    ctx.settings.push(...settings(reps));
    return { rows, profiles };
  } finally {
    await clients.close().catch(() => undefined);
    clients.stop();
    await host?.stop().catch(() => undefined);
    await deleteBenchStores(ctx.nc, names);
  }
}

async function runs(
  ctx: BenchContext,
  label: string,
  reps: Repetitions,
  once: (i: number) => Promise<Paired>,
): Promise<Paired[]> {
  const { kept, discarded } = await repeat(label, reps, once, busy);
  ctx.notes.push(noiseNote(label, kept.length, discarded.length, kept.filter(busy).length));
  kept.forEach((r, i) => ctx.runs.push(`${label} run ${i + 1}: ${r.summary}`));
  return kept;
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);
const share = (recovered: number, missed: number) => (missed === 0 ? 1 : recovered / missed);

function caseRows(kept: readonly Paired[], restart: boolean): Row[] {
  const tetherMs = median(kept.map((r) => r.tether.ms));
  const sioMs = median(kept.map((r) => r.sio.ms));
  const t = { recovered: sum(kept.map((r) => r.tether.recovered)), missed: sum(kept.map((r) => r.tether.missed)) };
  const s = { recovered: sum(kept.map((r) => r.sio.recovered)), missed: sum(kept.map((r) => r.sio.missed)) };
  const gapless = kept.filter((r) => r.tether.gapless).length;
  const flagged = kept.filter((r) => r.sio.recoveredFlag).length;
  const n = kept.length;
  const [timeLetter, countLetter, where] = restart
    ? ['(f2)', '(f3)', 'across a server restart']
    : ['(f)', '(f1)', 'after a drop'];
  const sioCaughtUp = restart && flagged === 0 ? 'to reconnected, nothing recovered' : 'to caught up';
  return [
    {
      measurement: `${timeLetter} resume ${where}: a ws client away while ${fmt.int(EVENTS)} events are stored reconnects with its cursor; time from its new connection to the last missed event received (median of ${n}), vs Socket.IO connection state recovery (${sioCaughtUp})`,
      tether: `${fmt.ms(tetherMs)} ms`,
      baseline: `${fmt.ms(sioMs)} ms`,
      ratio: tetherMs / sioMs,
      target: '— (no target)',
    },
    {
      measurement: `${countLetter} events recovered out of events missed ${where} (${n} runs together${restart ? "; Tether's missed events include the facts the restart stored" : ''}), vs Socket.IO's (\`socket.recovered\` in ${flagged} of ${n})`,
      tether: `${fmt.int(t.recovered)} / ${fmt.int(t.missed)}, gapless in ${gapless} of ${n}`,
      baseline: `${fmt.int(s.recovered)} / ${fmt.int(s.missed)}`,
      // Recovered share, Tether ÷ Socket.IO (higher is better; infinite when Socket.IO recovers none).
      ratio: share(t.recovered, t.missed) / share(s.recovered, s.missed),
      target: 'every missed event, once, in order',
      pass: gapless === n && t.recovered === t.missed,
    },
  ];
}

function verdictRow(every: ReadonlyArray<{ restart: boolean; run: Paired }>): Row {
  const tether = every.filter((e) => e.run.tether.gapless).length;
  const sio = every.filter((e) => e.run.sio.gapless).length;
  return {
    measurement: `(f4) gapless in every case: resumes where the client got every missed event once and in order, then the live ones (every resume of (f) to (f3), warm-ups with events stored during the catch-up and runs done again included), vs Socket.IO's`,
    tether: `${tether} of ${every.length}`,
    baseline: `${sio} of ${every.length}`,
    ratio: tether / sio,
    target: 'all',
    pass: tether === every.length,
  };
}

function notes(
  ctx: BenchContext,
  drop: readonly Paired[],
  restart: readonly Paired[],
  every: ReadonlyArray<{ restart: boolean; run: Paired }>,
): void {
  const med = (runs: readonly Paired[], pick: (r: Paired) => number) => fmt.ms(median(runs.map(pick)));
  ctx.notes.push(
    `Resume (f, f2) split (medians): after a drop, Tether's \`sync\` frame came ${med(drop, (r) => r.tether.syncMs)} ms after the new connection and the ${fmt.int(EVENTS)} missed events ${med(drop, (r) => r.tether.ms - r.tether.syncMs)} ms after it; Socket.IO connected in ${med(drop, (r) => r.sio.connectMs)} ms (its missed packets arrive before its CONNECT packet). The live probe after catching up (one more message, from POST to the watcher's frame) took ${med(drop, (r) => r.tether.probeMs)} ms on Tether. Across a restart: Tether caught up in ${med(restart, (r) => r.tether.ms)} ms (sync ${med(restart, (r) => r.tether.syncMs)} ms); the restart itself (server closed, sessions passivated, NATS drained, a new server listening) took ${med(restart, (r) => r.tether.restartMs ?? 0)} ms on Tether and ${med(restart, (r) => r.sio.restartMs ?? 0)} ms on Socket.IO.`,
  );
  const facts = new Map<string, number>();
  for (const r of restart)
    for (const [type, n] of Object.entries(r.tether.others)) facts.set(type, (facts.get(type) ?? 0) + n);
  const factList = [...facts.entries()].map(([type, n]) => `${fmt.int(n / restart.length)} \`${type}\``).join(', ');
  ctx.notes.push(
    `Across a restart (f2, f3), Tether's missed events are the ${fmt.int(EVENTS)} user messages plus what the shutdown and the new server stored meanwhile, per run: ${factList || 'nothing else'}. Socket.IO's new server has no session for the client's private id (connection state recovery keeps sessions and missed packets in the old server's memory), so \`socket.recovered\` is false and none of the ${fmt.int(EVENTS)} events reach the client; its time in (f2) is the reconnect alone.`,
  );
  ctx.notes.push(
    'Ratios of (f1, f3): the share of missed events recovered, Tether ÷ Socket.IO (higher is better; Infinity where Socket.IO recovered none); (f4): resumes gapless, Tether ÷ Socket.IO (higher is better); (f, f2): time, Tether ÷ Socket.IO (lower is better).',
  );
  const gaps = every.filter((e) => !e.run.tether.gapless);
  if (gaps.length > 0) {
    ctx.notes.push(
      `**Gapless target missed** in ${gaps.length} of ${every.length} Tether resumes: ${gaps.map((e) => `${e.restart ? 'across a restart' : 'after a drop'}: ${e.run.tether.recovered}/${e.run.tether.missed} recovered, ${e.run.tether.problem}`).join('; ')} (the first thing wrong in each). The resume profile below shows where the server's time went during one more resume.`,
    );
  }
}

function settings(reps: Record<'drop' | 'restart', Repetitions>): string[] {
  const r = (x: Repetitions) => `${x.warmups} warm-up + ${x.runs} measured runs`;
  return [
    `Resume (f, f1), Tether: a real Tether server in the bench's process (JetStream event log, KV conversation and snapshot stores, in-memory runtime, scripted agent that thinks for 10 minutes, silent logger, default limits) on a loopback port; its clients in one separate node process (\`bench/resumeProcess.ts\`). Per run a new conversation (its own user) is created with an initial message and waits until the agent is \`running\` (then every further user message is stored as exactly one event and nothing else is produced). A watching ws client connects, receives one live message (its cursor), and is dropped with \`terminate()\` (TCP closed, no close handshake); once the server has seen it go, another client of the same process stores ${fmt.int(EVENTS)} user messages through \`POST /api/conversations/:id/actions\` (${WRITE_WINDOW} requests in flight, each with a \`client_id\`). The watcher then opens a new ws with \`after_seq\` = its cursor; timed in the client process from \`new WebSocket\` until it has the last missed event and the \`sync\` frame's \`through_seq\`. Then one more message is posted and must arrive live. Checked: its frames after the reconnect against the log read through REST after the cursor: every event once, in order, same seq and same JSON bytes, through the live one.`,
    `Resume (f2, f3), Tether across a restart: as above, but after ${fmt.int(EVENTS / 2)} of the messages the server is stopped the way SIGTERM stops \`tether serve\` (HTTP and ws closed, \`manager.shutdown()\` passivates the sessions, the NATS connection drained) and a new one is started on the same port and store (its own NATS connection, stores, NodeHost; \`manager.recover()\` as \`serve\` does); the other ${fmt.int(EVENTS - EVENTS / 2)} messages are stored through the new server before the watcher reconnects to it with its cursor.`,
    `Resume baseline: Socket.IO (\`socket.io\` ${versionOf('socket.io')} server in the bench's process on its own loopback port, \`socket.io-client\` ${versionOf('socket.io-client')} in the same client process), \`connectionStateRecovery\` on (maxDisconnectionDuration 2 min, skipMiddlewares), websocket transport only on both ends, client \`reconnection: false\` so that the reconnect starts when the bench says. The client joins a room, receives one event (its recovery offset), then its websocket is killed under it (\`terminate()\` of the engine's \`ws\`: the server sees "transport close", a recoverable reason); the same ${fmt.int(EVENTS)} stored events as Tether's run (seq and event object) are emitted to the room; \`socket.connect()\` again, timed from that call until connected and, when \`socket.recovered\`, until the last missed event is received; then one live event. Across a restart (f2, f3): after ${fmt.int(EVENTS / 2)} events \`io.close()\` and a new server on the same port, which gets the other ${fmt.int(EVENTS - EVENTS / 2)}. Recovered = missed events received exactly once.`,
    `Resume repetitions: after a drop ${r(reps.drop)}, across a restart ${r(reps.restart)}; each run is Tether then Socket.IO on the same events; medians of the measured runs; a run during which other processes used over 20% of a core is run again (at most as many times as there are runs). (f1, f3) add up the measured runs; (f4) counts every resume, warm-ups and runs done again included. The warm-ups (not in the medians) also store ${DURING} more messages through REST while Tether's client catches up (posted as it opens its new connection), so that the gapless check covers the seam between history and live events too; Socket.IO's warm-ups emit nothing during its catch-up.`,
  ];
}
