import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ConversationInfo } from '../../protocol/index.ts';
import { type EventOf, type LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import {
  allEvents,
  createConversation,
  eventsWhen,
  http,
  postMessage,
  type ServerProcess,
} from '../support/serverProcess.ts';
import { endsAwaiting, expectDenseIds, repliesTo, stateOf, userMessage } from '../support/logQueries.ts';
import { describeLog } from '../support/faults.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

const e2e = useE2e();

const start = (dataDir: string, env: Record<string, string> = {}) => e2e.start({ dataDir, env });

async function killHard(server: ServerProcess): Promise<void> {
  server.kill('SIGKILL');
  expect((await server.exited).signal).toBe('SIGKILL');
}

/**
 * A new conversation, once its runtime is up. A message sent while it is still
 * starting is answered too, but with another `cause`; this keeps the tests on the crash.
 */
async function readyConversation(server: ServerProcess): Promise<string> {
  const id = await createConversation(server.baseUrl);
  await eventsWhen(server, id, `${id} ready`, endsAwaiting);
  return id;
}

/** GET /api/conversations, which reports `in_memory` without loading any session. */
async function inMemory(server: ServerProcess): Promise<Map<string, boolean>> {
  const res = await http<{ items: Array<{ conversation_id: string; in_memory: boolean }> }>(
    server.baseUrl,
    'GET',
    '/api/conversations',
  );
  expect(res.status).toBe(200);
  return new Map(res.body.items.map((item) => [item.conversation_id, item.in_memory]));
}

/**
 * Waits, touching none of them, until the restarted server has brought all
 * these conversations back into memory by itself. Returns the time just after:
 * no request about any of them was made before it.
 */
async function untilRecoveredUnasked(server: ServerProcess, ids: readonly string[]): Promise<number> {
  await until(
    async () => {
      const listed = await inMemory(server);
      return ids.every((id) => listed.get(id) === true);
    },
    'the restarted server to bring the conversations back by itself',
    SERVER_WAIT,
  );
  return Date.now();
}

type Output = LoggedEvent & { event: EventOf<'command_output'> };
const outputsOf = (events: readonly LoggedEvent[]): Output[] =>
  events.filter((e): e is Output => e.event.type === 'command_output');

/**
 * The log of a conversation brought back after a crash: the old events
 * untouched, then `session_rehydrated` from a fold of the whole log (no
 * snapshot was written: the process died), stamped before `unaskedUntil`,
 * that is before anyone asked about this conversation.
 */
function expectRecoveredByItself(
  before: readonly LoggedEvent[],
  after: readonly LoggedEvent[],
  unaskedUntil: number,
): void {
  expect(after.slice(0, before.length)).toEqual(before);
  const back = after[before.length]?.event;
  expect(back?.type, describeLog(after)).toBe('session_rehydrated');
  expect(back?.data).toEqual({ from: 'log', events_folded: before.length });
  expect(Date.parse(back!.ts)).toBeLessThanOrEqual(unaskedUntil);
  expect(after.filter((e) => e.event.type === 'session_rehydrated')).toHaveLength(1);
  expectDenseIds(after);
}

async function expectSettledInfo(server: ServerProcess, id: string, lastSeq: number): Promise<void> {
  const info = await http<ConversationInfo>(server.baseUrl, 'GET', `/api/conversations/${id}`);
  expect(info.status).toBe(200);
  expect(info.body).toMatchObject({
    conversation_id: id,
    state: 'awaiting_user_input',
    in_memory: true,
    last_seq: lastSeq,
  });
}

async function markerOf(dataDir: string, id: string): Promise<string> {
  return readFile(join(dataDir, 'workspaces', id, 'marks.txt'), 'utf8').catch(() => '');
}

/** Waits until the long command wrote its mark, and returns the log then: the command is out, without output. */
async function untilCommandRuns(
  server: ServerProcess,
  dataDir: string,
  id: string,
  mark: string,
): Promise<LoggedEvent[]> {
  await until(async () => (await markerOf(dataDir, id)) === `${mark}\n`, `the command of ${id} to start`, SERVER_WAIT);
  const events = await allEvents(server.baseUrl, id);
  expect(events.filter((e) => e.event.source === 'agent' && e.event.type === 'command')).toHaveLength(1);
  expect(outputsOf(events)).toEqual([]);
  expect(stateOf(events)).toBe('running');
  return events;
}

/** What must hold for a conversation whose long command was cut by the crash, once it settled. */
function expectInterruptedOnce(before: readonly LoggedEvent[], after: readonly LoggedEvent[]): void {
  const command = before.find((e) => e.event.source === 'agent' && e.event.type === 'command')!;
  const outputs = outputsOf(after);
  expect(outputs, describeLog(after)).toHaveLength(1);
  const output = outputs[0]!;
  expect(output.event.cause).toBe(command.event.id);
  expect(output.event.data.exit_code).toBeNull();
  expect(output.event.data.timed_out).toBe(false);
  expect(output.event.data.output).toMatch(/^interrupted/);
  // The agent was told and summarised it; it did not try the command again.
  const summary = after.find(
    (e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.id > output.event.id,
  );
  expect(summary, describeLog(after)).toBeDefined();
  expect((summary!.event as EventOf<'message'>).data.content).toContain('was interrupted');
  expect(after.filter((e) => e.event.type === 'command')).toHaveLength(1);
}

describe('crash recovery: a conversation that was mid-task when the server was killed finishes by itself', () => {
  it('retries the pending agent step after a kill -9, with no client asking, and ends awaiting the user', async () => {
    const dataDir = await e2e.tempDir();
    const first = await start(dataDir, { TETHER_AGENT_DELAY_MS: '5000' });
    const id = await readyConversation(first);
    const client = await e2e.connect(first, id);
    client.sendMessage('think hard');
    await client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === 'running',
      {
        what: 'the agent thinking',
      },
    );
    const before = await allEvents(first.baseUrl, id);
    expect(stateOf(before)).toBe('running');
    expect(repliesTo(before, 'think hard')).toEqual([]);
    await killHard(first);

    const second = await start(dataDir, { TETHER_AGENT_DELAY_MS: '300' });
    const unaskedUntil = await untilRecoveredUnasked(second, [id]);
    const after = await eventsWhen(
      second,
      id,
      'the answer after the restart',
      (e) => repliesTo(e, 'think hard').length > 0 && endsAwaiting(e),
    );
    expectRecoveredByItself(before, after, unaskedUntil);
    // One answer, to the message that was pending, with the message as its cause.
    const replies = repliesTo(after, 'think hard');
    expect(replies).toHaveLength(1);
    expect(replies[0]!.event.cause).toBe(userMessage(after, 'think hard')!.event.id);
    expectOneAnswerAfterOwnerLost(after);
    await expectSettledInfo(second, id, after.at(-1)!.seq);
  }, 90_000);

  it('reports a command cut by a kill -9 as interrupted exactly once, never runs it again, and lets the agent summarise it', async () => {
    const dataDir = await e2e.tempDir();
    const first = await start(dataDir);
    const id = await readyConversation(first);
    await postMessage(first, id, '!echo ran >> marks.txt; sleep 30');
    const before = await untilCommandRuns(first, dataDir, id, 'ran');
    await killHard(first);

    const second = await start(dataDir);
    const unaskedUntil = await untilRecoveredUnasked(second, [id]);
    const after = await eventsWhen(
      second,
      id,
      'the interrupted command summarised',
      (e) => outputsOf(e).length > 0 && endsAwaiting(e),
    );
    expectRecoveredByItself(before, after, unaskedUntil);
    expectInterruptedOnce(before, after);
    expect(await markerOf(dataDir, id)).toBe('ran\n');
    await expectSettledInfo(second, id, after.at(-1)!.seq);
  }, 90_000);

  it('does not let a command reported as interrupted by a kill -9 go on running in the workspace afterwards', async () => {
    const dataDir = await e2e.tempDir();
    const first = await start(dataDir);
    const id = await readyConversation(first);
    const restOfCommandMs = 4_000;
    await postMessage(
      first,
      id,
      `!echo ran >> marks.txt; sleep ${restOfCommandMs / 1000}; echo finished-anyway >> marks.txt`,
    );
    await untilCommandRuns(first, dataDir, id, 'ran');
    const killedAt = Date.now();
    await killHard(first);

    const second = await start(dataDir);
    await untilRecoveredUnasked(second, [id]);
    const after = await eventsWhen(
      second,
      id,
      'the interrupted command summarised',
      (e) => outputsOf(e).length > 0 && endsAwaiting(e),
    );
    expect(outputsOf(after)[0]!.event.data.output).toMatch(/^interrupted/);
    // When the interruption was reported, the command had not finished yet.
    expect(await markerOf(dataDir, id)).toBe('ran\n');
    // The log says it was interrupted: past the time it would have taken, it must not have finished after all.
    await new Promise((r) => setTimeout(r, Math.max(0, killedAt + restOfCommandMs + 1_500 - Date.now())));
    expect(await markerOf(dataDir, id)).toBe('ran\n');
  }, 90_000);

  it('brings back every conversation that was mid-task, agent steps and commands alike, and each one finishes', async () => {
    const dataDir = await e2e.tempDir();
    // Five running at once for one user: raise the per-user cap so none is sent away for that.
    const env = { TETHER_MAX_RUNNING_PER_USER: '5' };
    const first = await start(dataDir, { ...env, TETHER_AGENT_DELAY_MS: '4000' });
    const commands = [await readyConversation(first), await readyConversation(first)];
    const thinking = [await readyConversation(first), await readyConversation(first), await readyConversation(first)];
    // Commands first: the agent thinks before it runs them.
    for (const [i, id] of commands.entries()) await postMessage(first, id, `!echo ran-${i} >> marks.txt; sleep 30`);
    const before = new Map<string, LoggedEvent[]>();
    for (const [i, id] of commands.entries()) before.set(id, await untilCommandRuns(first, dataDir, id, `ran-${i}`));
    for (const [i, id] of thinking.entries()) await postMessage(first, id, `think ${i}`);
    for (const [i, id] of thinking.entries()) {
      const events = await eventsWhen(
        first,
        id,
        `${id} thinking`,
        (e) => stateOf(e) === 'running' && userMessage(e, `think ${i}`) !== undefined,
      );
      expect(repliesTo(events, `think ${i}`)).toEqual([]);
      before.set(id, events);
    }
    // Nothing was answered or finished meanwhile.
    for (const id of commands) expect(await allEvents(first.baseUrl, id)).toEqual(before.get(id));
    await killHard(first);

    const second = await start(dataDir, { ...env, TETHER_AGENT_DELAY_MS: '300' });
    const all = [...commands, ...thinking];
    const unaskedUntil = await untilRecoveredUnasked(second, all);
    for (const [i, id] of thinking.entries()) {
      const after = await eventsWhen(
        second,
        id,
        `${id} answered`,
        (e) => repliesTo(e, `think ${i}`).length > 0 && endsAwaiting(e),
      );
      expectRecoveredByItself(before.get(id)!, after, unaskedUntil);
      expect(repliesTo(after, `think ${i}`)).toHaveLength(1);
      expectOneAnswerAfterOwnerLost(after);
      await expectSettledInfo(second, id, after.at(-1)!.seq);
    }
    for (const [i, id] of commands.entries()) {
      const after = await eventsWhen(second, id, `${id} summarised`, (e) => outputsOf(e).length > 0 && endsAwaiting(e));
      expectRecoveredByItself(before.get(id)!, after, unaskedUntil);
      expectInterruptedOnce(before.get(id)!, after);
      expect(await markerOf(dataDir, id)).toBe(`ran-${i}\n`);
      await expectSettledInfo(second, id, after.at(-1)!.seq);
    }
    // Nothing is left stuck working.
    const listed = await http<{ items: Array<{ conversation_id: string; state: string | null }> }>(
      second.baseUrl,
      'GET',
      '/api/conversations',
    );
    expect(new Set(listed.body.items.filter((c) => all.includes(c.conversation_id)).map((c) => c.state))).toEqual(
      new Set(['awaiting_user_input']),
    );
  }, 120_000);
});

/** The step the crash cut was asked again as its next attempt (the owner was lost), and answered once. */
function expectOneAnswerAfterOwnerLost(after: LoggedEvent[]): void {
  const agent = after.map((e) => e.event).filter((e) => e.source === 'agent');
  expect(agent.map((e) => e.type)).toEqual(['agent_attempt', 'message']);
  expect(agent[0]).toMatchObject({ data: { attempt: 2, reason: 'owner_lost' } });
  expect(agent[1]).toMatchObject({ data: { attempt: 2 } });
}
