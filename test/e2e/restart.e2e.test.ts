import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConversationInfo, type LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { allEvents, createConversation, eventsWhen, http } from '../support/serverProcess.ts';
import { endsAwaiting, expectDenseIds, stateOf } from '../support/logQueries.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

const e2e = useE2e();

/** The agent's message that answers the user message with this content (its cause is that message's id). */
function replyTo(events: LoggedEvent[], content: string): LoggedEvent | undefined {
  const asked = events.find(
    (e) => e.event.source === 'user' && e.event.type === 'message' && e.event.data.content === content,
  );
  if (!asked) return undefined;
  return events.find(
    (e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.cause === asked.event.id,
  );
}

describe('restarting the server on the same data directory', () => {
  it('keeps every conversation and its events, and answers new messages with ids that continue densely', async () => {
    const dataDir = await e2e.tempDir();
    const first = await e2e.start({ dataDir });
    const id = await createConversation(first.baseUrl);
    const client = await e2e.connect(first, id);
    client.sendMessage('before the restart');
    const before = await eventsWhen(
      first,
      id,
      'the reply before the restart',
      (e) => endsAwaiting(e) && replyTo(e, 'before the restart') !== undefined,
    );
    expectDenseIds(before);

    // A stopping server tells its clients it is going away.
    const exit = await first.stop();
    expect(exit).toEqual({ code: 0, signal: null });
    expect((await client.closed).code).toBe(1001);

    const second = await e2e.start({ dataDir });
    const list = await http<{ items: Array<{ conversation_id: string }> }>(second.baseUrl, 'GET', '/api/conversations');
    expect(list.status).toBe(200);
    expect(list.body.items.map((c) => c.conversation_id)).toContain(id);

    const info = await http<ConversationInfo>(second.baseUrl, 'GET', `/api/conversations/${id}`);
    expect(info.status).toBe(200);
    expect(ConversationInfo.safeParse(info.body).error).toBeUndefined();
    expect(info.body).toMatchObject({ conversation_id: id, user: 'local', state: 'awaiting_user_input' });
    expect(info.body.last_seq).toBeGreaterThanOrEqual(before.at(-1)!.seq);

    // The stored history is unchanged (later events may be appended, never rewritten).
    const restored = await allEvents(second.baseUrl, id);
    expect(restored.slice(0, before.length)).toEqual(before);

    const again = await e2e.connect(second, id);
    expect(again.frames[0]).toMatchObject({ type: 'sync', conversation_id: id, state: 'awaiting_user_input' });
    again.sendMessage('after the restart');
    again.sendMessage('!echo still-$((40 + 2))');
    const after = await eventsWhen(
      second,
      id,
      'the replies after the restart',
      (e) =>
        endsAwaiting(e) &&
        replyTo(e, 'after the restart') !== undefined &&
        e.some((x) => x.event.type === 'command_output'),
    );
    expectDenseIds(after);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.at(-1)!.event.id).toBeGreaterThan(before.at(-1)!.event.id);
    const output = after.find((e) => e.event.type === 'command_output');
    expect(output?.event.data).toMatchObject({ exit_code: 0, output: 'still-42\n' });

    // A client starting from nothing sees the whole log, before and after the restart, once.
    await again.waitUntil(() => again.lastSeq() >= after.at(-1)!.seq, { what: 'the latest events' });
    await again.roundTrip();
    expect(again.seqs()).toEqual(after.map((e) => e.seq));
    expect(again.events().map((f) => f.event)).toEqual(after.map((e) => e.event));
  }, 120_000);

  it('reports a command that was running when the server was killed as interrupted, and does not run it again', async () => {
    const dataDir = await e2e.tempDir();
    const first = await e2e.start({ dataDir });
    const id = await createConversation(first.baseUrl);
    const client = await e2e.connect(first, id);
    // The command leaves a mark, then outlives the server.
    client.sendMessage('!echo ran >> marks.txt; sleep 20');
    const marks = join(dataDir, 'workspaces', id, 'marks.txt');
    const started = await until(
      async () => (await readFile(marks, 'utf8').catch(() => '')) === 'ran\n',
      'the command to start',
      SERVER_WAIT,
    );
    expect(started).toBe(true);
    const beforeKill = await allEvents(first.baseUrl, id);
    const command = beforeKill.find((e) => e.event.source === 'agent' && e.event.type === 'command');
    expect(command, 'the agent command event').toBeDefined();
    expect(beforeKill.some((e) => e.event.type === 'command_output')).toBe(false);

    first.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');

    const second = await e2e.start({ dataDir });
    // Opening the conversation brings it back; it then finishes by itself.
    await e2e.connect(second, id);
    const after = await eventsWhen(
      second,
      id,
      'the interrupted command to be reported',
      (e) =>
        e.some((x) => x.event.type === 'command_output' && x.event.cause === command!.event.id) &&
        ['awaiting_user_input', 'finished'].includes(stateOf(e)),
    );
    expectDenseIds(after);
    expect(after.slice(0, beforeKill.length)).toEqual(beforeKill);
    const outputs = after.filter((e) => e.event.type === 'command_output');
    expect(outputs).toHaveLength(1);
    expect(outputs[0]!.event.data).toMatchObject({ exit_code: null });
    expect(await readFile(marks, 'utf8')).toBe('ran\n');
  }, 120_000);
});
