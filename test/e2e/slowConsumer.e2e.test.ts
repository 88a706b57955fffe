import { readFile, writeFile } from 'node:fs/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { createConversation, eventsWhen, type ServerProcess } from '../support/serverProcess.ts';
import type { EventFrame, WsClient } from '../support/wsClient.ts';

// 100 commands of 500 kB each: 50 MB of command_output events flow past a client
// that does not read, six times the documented 8 MiB bound on bytes queued per client.
// Before that, 40 such commands with every client reading warm the server up: V8's
// young generation and heap grow to their working size under this load whoever
// reads (measured: about as much growth with the client reading as without), and
// that growth is not what a client that stops reading costs.
const OUTPUT_BYTES = 500_000;
const WARM_UP_COMMANDS = 40;
const COMMANDS = 100;
const BIG_COMMAND = `head -c ${OUTPUT_BYTES} /dev/zero | tr '\\0' x`;
const MIB = 1024 * 1024;
const MAX_RSS_GROWTH_BYTES = 64 * MIB;
const SAMPLE_EVERY_MS = 100;

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  // A paused client cannot answer pings, nor the server's close frame until it reads again (which can be
  // over 30 s later when the whole suite loads the machine): no heartbeat drop and no close timeout, only the 1013.
  server = await e2e.start({
    env: {
      TETHER_OUTPUT_CAP_BYTES: String(OUTPUT_BYTES + 10_000),
      TETHER_WS_PING_MS: '600000',
      TETHER_WS_CLOSE_TIMEOUT_MS: '600000',
    },
  });
}, 60_000);

const connect = (id: string, afterSeq?: number) => e2e.connect(server, id, { afterSeq });

/** A field of /proc/<pid>/status in bytes (VmRSS, VmHWM): this process only, not its children. */
async function procBytes(pid: number, field: 'VmRSS' | 'VmHWM'): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status);
  if (!match) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(match[1]) * 1024;
}

/** The processes under the server (the nats-server guard and nats-server, bash runtimes): separate, not in its RSS. */
async function descendantsOf(pid: number): Promise<Array<{ pid: number; name: string; rss: number }>> {
  const found = [];
  const list = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  for (const child of list.split(/\s+/).filter(Boolean).map(Number)) {
    const status = await readFile(`/proc/${child}/status`, 'utf8').catch(() => '');
    const name = /^Name:\s+(.*)$/m.exec(status)?.[1] ?? '?';
    const rss = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? 0) * 1024;
    found.push({ pid: child, name, rss }, ...(await descendantsOf(child)));
  }
  return found;
}

/** Samples the server's RSS every 100 ms until stopped; keeps the largest value seen. */
function rssSampler(pid: number): { stop: () => Promise<{ max: number; samples: number }> } {
  let max = 0;
  let samples = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      max = Math.max(max, await procBytes(pid, 'VmRSS'));
      samples += 1;
      await new Promise((r) => setTimeout(r, SAMPLE_EVERY_MS));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return { max, samples };
    },
  };
}

/** The median of a few readings of the server's RSS. */
async function medianRss(): Promise<number> {
  const readings: number[] = [];
  for (let i = 0; i < 5; i++) {
    readings.push(await procBytes(server.pid, 'VmRSS'));
    await new Promise((r) => setTimeout(r, SAMPLE_EVERY_MS));
  }
  return readings.sort((a, b) => a - b)[2]!;
}

/** Runs `count` commands that each print OUTPUT_BYTES, one after the other (a run action is only accepted while the agent waits). */
async function runBigCommands(producer: WsClient, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const from = producer.frames.length;
    producer.send({ type: 'user_action', action: { type: 'run', command: BIG_COMMAND } });
    await producer.waitFor(
      (f) =>
        f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === 'awaiting_user_input',
      { from, what: `command ${i} to finish`, timeoutMs: 30_000 },
    );
  }
}

const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;
const describeProcesses = (list: Array<{ pid: number; name: string; rss: number }>) =>
  list.map((p) => `${p.name} ${mib(p.rss)}`).join(', ');
const asLogged = (f: EventFrame) => ({ seq: f.seq, event: f.event });

describe('a client that stops reading while 50 MB of events flow to it', () => {
  it('costs the server less than 64 MB of memory, is closed with 1013, and gets every remaining event exactly once by reconnecting with its cursor', async () => {
    const id = await createConversation(server.baseUrl);
    const producer = await connect(id);
    const slow = await connect(id);
    await slow.roundTrip();

    const coldBaseline = await medianRss();
    const warmUp = rssSampler(server.pid);
    let cold: { max: number; samples: number };
    try {
      await runBigCommands(producer, WARM_UP_COMMANDS);
    } finally {
      cold = await warmUp.stop();
    }
    await slow.waitUntil(() => slow.lastSeq() >= producer.lastSeq(), {
      what: 'the warm-up on the slow client too',
      timeoutMs: 30_000,
    });
    const seenBeforePause = slow.events().length;
    expect(seenBeforePause).toBeGreaterThan(WARM_UP_COMMANDS);
    // Stop reading: the kernel buffers fill, then whatever the server queues for this client.
    slow.socket.pause();

    const baseline = await medianRss();
    // Reset the kernel's peak-RSS mark so VmHWM catches a peak between two samples (best effort: "5" clears it).
    const hwmReset = await writeFile(`/proc/${server.pid}/clear_refs`, '5').then(
      () => true,
      () => false,
    );
    const childrenBefore = await descendantsOf(server.pid);
    const sampler = rssSampler(server.pid);

    const floodStarted = Date.now();
    let sampled: { max: number; samples: number };
    try {
      await runBigCommands(producer, COMMANDS);
    } finally {
      sampled = await sampler.stop();
    }
    const floodMs = Date.now() - floodStarted;
    const peak = hwmReset ? Math.max(sampled.max, await procBytes(server.pid, 'VmHWM')) : sampled.max;
    const childrenAfter = await descendantsOf(server.pid);
    console.log(
      `server pid ${server.pid} RSS: baseline ${mib(baseline)}, sampled max ${mib(sampled.max)} over ${sampled.samples} samples, ` +
        `peak ${mib(peak)}${hwmReset ? ' (VmHWM)' : ''}, growth ${mib(peak - baseline)} during a ${floodMs} ms flood of ` +
        `${mib(COMMANDS * OUTPUT_BYTES)} (the warm-up with every client reading: baseline ${mib(coldBaseline)}, peak ${mib(cold.max)}, growth ${mib(cold.max - coldBaseline)}); processes under it (not counted) before ${describeProcesses(childrenBefore)}; after ${describeProcesses(childrenAfter)}`,
    );
    expect(sampled.samples).toBeGreaterThanOrEqual(5);

    const rest = await eventsWhen(
      server,
      id,
      `${WARM_UP_COMMANDS + COMMANDS} command outputs stored`,
      (events) => {
        const outputs = events.filter((e) => e.event.type === 'command_output').length;
        const last = events.at(-1)?.event;
        const idle = last?.type === 'agent_state_changed' && last.data.state === 'awaiting_user_input';
        return outputs === WARM_UP_COMMANDS + COMMANDS && idle;
      },
      60_000,
    );
    const outputs = rest.filter(
      (e): e is LoggedEvent & { event: { type: 'command_output' } } => e.event.type === 'command_output',
    );
    expect(outputs.map((e) => e.event.data.output.length)).toEqual(
      Array.from({ length: WARM_UP_COMMANDS + COMMANDS }, () => OUTPUT_BYTES),
    );

    // The reading client got everything, so the flood really reached the server's sockets.
    await producer.waitUntil(() => producer.lastSeq() >= rest.at(-1)!.seq, {
      what: 'every event on the reading client',
      timeoutMs: 60_000,
    });
    expect(producer.events().map(asLogged)).toEqual(rest);

    // The slow one reads again: at the end of what was queued for it is a 1013 close, not a live connection.
    slow.socket.resume();
    const outcome = await Promise.race([
      slow.closed.then((c) => `closed with ${c.code}`),
      slow.roundTrip(60_000).then(() => 'still open after every event was delivered'),
    ]);
    expect(outcome).toBe('closed with 1013');
    expect(slow.closeInfo?.reason).toMatch(/slow consumer/);

    // It received a gap-free prefix, cut well before the end of the flood.
    const seen = slow.events().map(asLogged);
    console.log(
      `slow client: ${seen.length} of ${rest.length} events before the 1013 close (last seq ${slow.lastSeq()})`,
    );
    expect(seen).toEqual(rest.slice(0, seen.length));
    expect(seen.length).toBeGreaterThanOrEqual(seenBeforePause);
    expect(seen.length).toBeLessThan(rest.length);

    // Reconnecting with its cursor gives the rest: each once, in order, the same events as over REST.
    const again = await connect(id, slow.lastSeq());
    await again.waitUntil(() => again.lastSeq() >= rest.at(-1)!.seq, {
      what: 'the rest of the events',
      timeoutMs: 60_000,
    });
    await again.roundTrip();
    expect(again.events().map(asLogged)).toEqual(rest.slice(seen.length));
    expect([...seen, ...again.events().map(asLogged)]).toEqual(rest);
    expect(again.isOpen).toBe(true);
    expect([producer.invalid, slow.invalid, again.invalid]).toEqual([[], [], []]);

    // Checked last so that the delivery guarantees above are checked whatever the memory figure.
    expect(peak - baseline, `server RSS growth (baseline ${mib(baseline)}, peak ${mib(peak)})`).toBeLessThan(
      MAX_RSS_GROWTH_BYTES,
    );
  }, 150_000);
});
