import { describe, expect, it } from 'vitest';
import { scriptedAgent, type Agent } from '../../src/agent/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { memoryRuntimeProvider, type CommandHandler } from '../../src/runtime/memoryRuntime.ts';
import type { NodeHost } from '../../src/host/index.ts';
import { memoryEventLog, type EventLog, type ReadOptions } from '../../src/store/index.ts';
import { memoryHost } from '../support/memoryHost.ts';

const defaults = { confirmation_mode: false, max_iterations: 10_000, secrets: {} };

/** Every command prints 100 KB: forty rounds make a history past 4 MiB. */
const bigOutput: CommandHandler = (command) => ({
  exit_code: 0,
  output: `${command}\n${'x'.repeat(100_000)}\n`,
  timed_out: false,
  truncated: false,
});

/** The memory log, counting the reads that start from the conversation's first event. */
function countingLog(): { log: EventLog; wholeReads: () => number } {
  const log = memoryEventLog();
  let whole = 0;
  const read = log.read.bind(log);
  log.read = (id: string, options?: ReadOptions) => {
    if (!options?.afterSeq) whole += 1;
    return read(id, options);
  };
  return { log, wholeReads: () => whole };
}

/** The scripted agent, recording each event its contexts observe. */
function observingAgent(): { agent: Agent; observed: number[]; contexts: () => number } {
  const observed: number[] = [];
  let contexts = 0;
  const agent: Agent = {
    context: () => {
      contexts += 1;
      const inner = scriptedAgent().context();
      return {
        observe: (event) => {
          observed.push(event.id);
          inner.observe(event);
        },
        step: (input) => inner.step(input),
      };
    },
  };
  return { agent, observed, contexts: () => contexts };
}

async function events(log: EventLog, id: string): Promise<StoredEvent[]> {
  return (await log.read(id)).items.map((i) => i.event);
}

/** One `!cat` round: the agent runs it, summarises the output, and waits again. */
async function round(m: NodeHost, log: EventLog, id: string, n: number): Promise<void> {
  await m.commands.act(id, 'local', { type: 'message', content: `!cat file-${n}` });
  for (let i = 0; i < 500; i++) {
    const last = (await log.last(id))?.event;
    if (last?.type === 'agent_state_changed' && last.data.state === 'awaiting_user_input') return;
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`round ${n} never ended`);
}

describe("a session's agent context", () => {
  it('observes every stored event once, in order, whatever the number of steps', async () => {
    const { log, wholeReads } = countingLog();
    const { agent, observed, contexts } = observingAgent();
    const m = memoryHost({ log, agentFor: () => agent, runtimes: memoryRuntimeProvider(bigOutput) });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    for (let n = 0; n < 10; n++) await round(m, log, id, n);
    const stored = await events(log, id);
    // Twenty agent steps, and each event was shown to the agent exactly once.
    expect(stored.filter((e) => e.source === 'agent').length).toBe(20);
    expect(observed).toEqual(stored.map((e) => e.id));
    expect(contexts()).toBe(1);
    // No step read the log (the one read here is the test's own).
    expect(wholeReads()).toBe(1);
    await m.shutdown();
  });

  it('is rebuilt from the log once after a snapshot restore, not once per step, however long the history', async () => {
    const { log, wholeReads } = countingLog();
    const m = memoryHost({ log, runtimes: memoryRuntimeProvider(bigOutput) });
    const { conversation_id: id } = await m.commands.create('local', defaults);
    for (let n = 0; n < 42; n++) await round(m, log, id, n);
    const bytes = (await events(log, id)).reduce((sum, e) => sum + JSON.stringify(e).length, 0);
    expect(bytes).toBeGreaterThan(4 * 1024 * 1024);
    await m.passivate(id, 'close_delay');
    const before = wholeReads();
    // Back from its snapshot by the first message; eight agent steps.
    for (let n = 42; n < 46; n++) await round(m, log, id, n);
    expect(wholeReads() - before).toBe(1);
    // And the rebuilt context answers as the live one did: the summary of the last command.
    const replies = (await events(log, id)).filter((e) => e.source === 'agent' && e.type === 'message');
    expect(replies.at(-1)?.data).toMatchObject({ content: expect.stringMatching(/^`cat file-45` exited with code 0/) });
    await m.shutdown();
  });
});
