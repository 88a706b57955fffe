import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { deltasOf } from '../support/deltaChecks.ts';
import { useE2e } from '../support/e2e.ts';
import { startLlmNodes } from '../support/llmNodes.ts';
import { streamed, type FakeLlmServer, type RecordedRequest } from '../support/fakeLlmServer.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { hostPidOf, processRuns } from '../support/processes.ts';
import { until } from '../support/until.ts';
import type { Frame, WsClient } from '../support/wsClient.ts';

// Two `tether serve` processes on one nats-server, the LLM agent streaming from
// a fake OpenAI-compatible server: an interrupt, a stop, a pause and messages
// sent while the agent works, with what each stores and what each really stops
// (the LLM request, the command's processes). Issue 24.
const e2e = useE2e();
let llm: FakeLlmServer;
let a: ServerProcess;
let b: ServerProcess;
const workspaces = () => join(a.dataDir, 'workspaces');

beforeAll(async () => {
  ({ llm, a, b } = await startLlmNodes(e2e));
}, 60_000);

type Event<T extends StoredEvent['type']> = Extract<StoredEvent, { type: T }>;

/** A long reply: 40 pieces, 100 ms apart (4 s in all), so that every action lands mid-stream. */
const LONG = Array.from({ length: 40 }, (_, i) => `word${i} `);
const longReply = () => streamed(LONG, { gapMs: 100 });

/** A conversation owned by A, with a client on `node`. */
async function conversation(node: ServerProcess, body: Record<string, unknown> = {}) {
  const id = await createConversation(a.baseUrl, body);
  const client = await e2e.connect(node, id);
  return { id, client };
}

const act = (node: ServerProcess, id: string, action: unknown) =>
  http<{ error?: { code: string } }>(node.baseUrl, 'POST', `/api/conversations/${id}/actions`, { action });

/** The first event frame from index `from` on that passes `test`. */
const eventFrame = (client: WsClient, from: number, test: (e: StoredEvent) => boolean, what: string) =>
  client.waitFor<Extract<Frame, { type: 'event' }>>((f) => f.type === 'event' && test(f.event), {
    what,
    from,
    timeoutMs: 10_000,
  });

/** The agent state reached after frame `from` (a conversation starts in awaiting_user_input: older frames do not count). */
const stateReached = (client: WsClient, from: number, state: string) =>
  eventFrame(client, from, (e) => isState(e, state), state);

/** The request the fake got for this conversation's next step, from `index` on. */
const requestAt = async (index: number): Promise<RecordedRequest> => {
  await llm.received(index + 1);
  return llm.requests[index]!;
};

/** Every tool call of the request's history is followed by its tool result, as chat APIs require. */
function expectEveryToolCallAnswered(request: RecordedRequest): void {
  const messages = request.body.messages as Array<{
    role: string;
    tool_calls?: { id: string }[];
    tool_call_id?: string;
  }>;
  messages.forEach((message, i) => {
    for (const call of message.tool_calls ?? []) {
      expect(messages[i + 1], `the result of ${call.id}`).toMatchObject({ role: 'tool', tool_call_id: call.id });
    }
  });
}

const events = (log: LoggedEvent[]) => log.map((e) => e.event);

describe('an interrupt', () => {
  it('mid-stream stores what was streamed with interrupted: true, awaits the user within a second, and aborts the LLM request', async () => {
    const { id, client } = await conversation(a);
    const index = llm.requests.length;
    llm.enqueue(longReply());
    client.sendMessage('tell me a long story');
    await client.waitUntil(() => deltasOf(client.frames).length >= 3, { what: 'three deltas' });
    const seen = deltasOf(client.frames)
      .map((d) => d.text)
      .join('');
    const sent = performance.now();
    const mark = client.frames.length;
    client.send({ type: 'user_action', action: { type: 'interrupt' } });
    await stateReached(client, mark, 'awaiting_user_input');
    expect(performance.now() - sent, 'ms until the agent awaits the user').toBeLessThan(1_000);

    const log = events(await allEvents(a.baseUrl, id));
    const at = log.findIndex((e) => e.type === 'interrupt');
    expect(log[at]).toMatchObject({ source: 'user', data: {} });
    const partial = log[at + 1] as Event<'message'>;
    const item = deltasOf(client.frames)[0]!.item_id;
    expect(partial).toMatchObject({ source: 'agent', type: 'message', data: { interrupted: true, item_id: item } });
    expect(partial.data.content.startsWith(seen), `${partial.data.content} starts with ${seen}`).toBe(true);
    expect(LONG.join('').startsWith(partial.data.content)).toBe(true);
    expect(log[at + 2]).toMatchObject({ type: 'agent_state_changed', data: { state: 'awaiting_user_input' } });
    await until(() => llm.requests[index]!.abandoned, 'the fake to see its request aborted', { timeoutMs: 5_000 });
    // Nothing else is stored for that step, and no delta of it went out past what was stored.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(events(await allEvents(a.baseUrl, id)).slice(at + 3)).toEqual([]);
    const sentToClient = deltasOf(client.frames)
      .map((d) => d.text)
      .join('');
    expect(partial.data.content.startsWith(sentToClient), `${sentToClient} within ${partial.data.content}`).toBe(true);
  }, 30_000);

  it('sent to a node that does not own the conversation is forwarded and cuts the step the same way', async () => {
    const { id, client } = await conversation(b);
    const index = llm.requests.length;
    llm.enqueue(longReply());
    client.sendMessage('hi');
    await client.waitUntil(() => deltasOf(client.frames).length >= 2, { what: 'two deltas on B' });
    const mark = client.frames.length;
    const answer = await act(b, id, { type: 'interrupt' });
    expect(answer.status).toBe(202);
    await stateReached(client, mark, 'awaiting_user_input');
    const log = events(await allEvents(a.baseUrl, id));
    expect(log.filter((e) => e.type === 'message' && e.source === 'agent')).toMatchObject([
      { data: { interrupted: true } },
    ]);
    await until(() => llm.requests[index]!.abandoned, 'the request aborted', { timeoutMs: 5_000 });
    // Where nothing works, an interrupt is refused and stores nothing.
    const refused = await act(b, id, { type: 'interrupt' });
    expect(refused).toMatchObject({ status: 409, body: { error: { code: 'ILLEGAL_TRANSITION' } } });
  }, 30_000);

  it("during a long command kills its process group, and the model's next request has every tool call answered", async () => {
    const { id, client } = await conversation(a);
    const command = `bash -c 'echo $$ > cmd.pid; (trap "" INT; exec sleep 300) & echo $! > bg.pid; wait'`;
    llm.enqueue(streamed(['Running it.'], { toolCall: { name: 'run_command', args: { command } } }));
    client.sendMessage('run the long thing');
    const dir = join(workspaces(), id);
    const pids = await until(() => {
      const files = ['cmd.pid', 'bg.pid'].map((f) => join(dir, f));
      if (!files.every((f) => existsSync(f) && readFileSync(f, 'utf8').trim())) return false;
      // Pids as the sandbox sees them (the same outside one): found here by their working directory.
      const found = files.map((f) => hostPidOf(Number(readFileSync(f, 'utf8')), (p) => p.cwd === dir));
      return found.every((pid) => pid !== undefined) && found;
    }, 'the command to start');
    expect(pids.every(processRuns)).toBe(true);
    let mark = client.frames.length;
    client.send({ type: 'user_action', action: { type: 'interrupt' } });
    await stateReached(client, mark, 'awaiting_user_input');
    const log = events(await allEvents(a.baseUrl, id));
    const output = log.find((e) => e.type === 'command_output') as Event<'command_output'>;
    expect(output.data).toMatchObject({ cancelled: 'interrupt', exit_code: null });
    // SIGINT ends the command; what ignores it is killed after the grace period (1 s).
    await until(() => !pids.some(processRuns), 'the processes to die', { timeoutMs: 5_000 });

    const index = llm.requests.length;
    llm.enqueue(streamed(['Fine.']));
    mark = client.frames.length;
    client.sendMessage('what happened?');
    const request = await requestAt(index);
    expectEveryToolCallAnswered(request);
    const messages = request.body.messages as Array<{ role: string; content: string | null }>;
    expect(messages.find((m) => m.role === 'tool')?.content).toMatch(/cancelled/);
    await stateReached(client, mark, 'awaiting_user_input');
  }, 30_000);
});

describe('a stop', () => {
  it('aborts the LLM request and a running command alike, then stops', async () => {
    const { id, client } = await conversation(a);
    const index = llm.requests.length;
    llm.enqueue(longReply());
    client.sendMessage('hi');
    await client.waitUntil(() => deltasOf(client.frames).length >= 2, { what: 'two deltas' });
    client.send({ type: 'user_action', action: { type: 'change_agent_state', state: 'stopped' } });
    await stateReached(client, 0, 'stopped');
    await until(() => llm.requests[index]!.abandoned, 'the request aborted', { timeoutMs: 5_000 });
    let log = events(await allEvents(a.baseUrl, id));
    expect(log.filter((e) => e.type === 'message' && e.source === 'agent')).toMatchObject([
      { data: { interrupted: true } },
    ]);

    const from = client.frames.length;
    client.send({ type: 'user_action', action: { type: 'run', command: 'echo $$ > stop.pid; exec sleep 300' } });
    const pidFile = join(workspaces(), id, 'stop.pid');
    const pid = await until(
      () => existsSync(pidFile) && hostPidOf(Number(readFileSync(pidFile, 'utf8')), (p) => p.cwd === dirname(pidFile)),
      'the command',
    );
    client.send({ type: 'user_action', action: { type: 'change_agent_state', state: 'stopped' } });
    await stateReached(client, from, 'stopped');
    await until(() => !processRuns(pid), 'the command to die', { timeoutMs: 5_000 });
    log = events(await allEvents(a.baseUrl, id));
    expect(log.filter((e) => e.type === 'command_output')).toMatchObject([{ data: { cancelled: 'stop' } }]);
  }, 30_000);
});

describe('a pause while the agent thinks', () => {
  it('keeps the agent running until the step answers, stores the answer and its usage, then pauses', async () => {
    const { id, client } = await conversation(a);
    const index = llm.requests.length;
    const usage = { prompt_tokens: 12, completion_tokens: 3 };
    llm.enqueue(streamed(['Almost ', 'there ', 'now.'], { gapMs: 300, usage }));
    client.sendMessage('hi');
    await client.waitUntil(() => deltasOf(client.frames).length >= 1, { what: 'a delta' });
    client.send({ type: 'user_action', action: { type: 'change_agent_state', state: 'paused' } });
    await eventFrame(client, 0, (e) => e.type === 'change_agent_state', 'the pause request stored');
    const log = events(await eventsWhen(a, id, 'paused', (l) => l.some((e) => isState(e.event, 'paused'))));
    const pausedAt = log.findIndex((e) => isState(e, 'paused'));
    const asked = log.findIndex((e) => e.type === 'change_agent_state');
    // Between the request and the pause: only the answer and its usage; the agent stays running.
    expect(log.slice(asked, pausedAt + 1).map((e) => e.type)).toEqual([
      'change_agent_state',
      'agent_usage',
      'message',
      'agent_state_changed',
    ]);
    expect(log[pausedAt - 1]).toMatchObject({ data: { content: 'Almost there now.' } });
    expect((log[pausedAt - 1] as Event<'message'>).data.interrupted).toBeUndefined();
    expect(log[asked + 1]).toMatchObject({ data: usage });
    expect(llm.requests[index]!.abandoned).toBe(false);
  }, 30_000);
});

describe('a message while the agent works', () => {
  it('is read at the next step under enqueue (the default): the step answers whole', async () => {
    const { id, client } = await conversation(a);
    const index = llm.requests.length;
    llm.enqueue(streamed(['First ', 'answer.'], { gapMs: 300 }), streamed(['Second.']));
    client.sendMessage('one');
    await client.waitUntil(() => deltasOf(client.frames).length >= 1, { what: 'a delta' });
    client.sendMessage('two');
    await eventsWhen(a, id, 'two answers', (l) => l.filter((e) => isAgentMessage(e.event)).length === 2);
    const answers = events(await allEvents(a.baseUrl, id)).filter(isAgentMessage);
    expect(answers.map((e) => [e.data.content, e.data.interrupted])).toEqual([
      ['First answer.', undefined],
      ['Second.', undefined],
    ]);
    expect(llm.requests[index]!.abandoned).toBe(false);
  }, 30_000);

  it('interrupts the agent first under interrupt, then is handled', async () => {
    const { id, client } = await conversation(a, { double_texting: 'interrupt' });
    const index = llm.requests.length;
    llm.enqueue(longReply(), streamed(['About two.']));
    client.sendMessage('one');
    await client.waitUntil(() => deltasOf(client.frames).length >= 2, { what: 'two deltas' });
    // Through REST: the answer names the message's own event, not the interrupt stored before it.
    const sent = await act(a, id, { type: 'message', content: 'two' });
    expect(sent.status).toBe(202);
    const logged = await eventsWhen(a, id, 'the answer to two', (l) =>
      l.some((e) => isAgentMessage(e.event) && !e.event.data.interrupted),
    );
    const two = logged.find((e) => e.event.type === 'message' && e.event.data.content === 'two')!;
    expect((sent.body as { seq: number }).seq).toBe(two.seq);
    const log = events(logged);
    const from = log.findIndex((e) => e.type === 'interrupt');
    expect(log.slice(from, from + 5).map((e) => [e.type, e.source])).toEqual([
      ['interrupt', 'user'],
      ['message', 'agent'],
      ['agent_state_changed', 'environment'],
      ['message', 'user'],
      ['agent_state_changed', 'environment'],
    ]);
    expect(log[from + 1]).toMatchObject({ data: { interrupted: true } });
    expect(log.filter(isAgentMessage).at(-1)!.data.content).toBe('About two.');
    expect(llm.requests[index]!.abandoned).toBe(true);
  }, 30_000);

  it('is refused with AGENT_BUSY under reject, over ws and REST, and nothing is stored', async () => {
    const { id, client } = await conversation(b, { double_texting: 'reject' });
    llm.enqueue(streamed(['Busy ', 'now.'], { gapMs: 400 }));
    client.sendMessage('one');
    await client.waitUntil(() => deltasOf(client.frames).length >= 1, { what: 'a delta' });
    const before = (await allEvents(a.baseUrl, id)).length;
    client.sendMessage('two', 'msg-two');
    const error = await client.waitFor<Extract<Frame, { type: 'error' }>>((f) => f.type === 'error', {
      what: 'the error frame',
    });
    // The refusal names the action it refuses.
    expect(error).toMatchObject({ code: 'AGENT_BUSY', client_id: 'msg-two' });
    const rest = await act(b, id, { type: 'message', content: 'three' });
    expect(rest).toMatchObject({ status: 409, body: { error: { code: 'AGENT_BUSY' } } });
    const log = events(await allEvents(a.baseUrl, id));
    expect(log.slice(before).filter((e) => e.source === 'user')).toEqual([]);
    // Once the agent is done, the conversation takes messages again.
    await eventsWhen(
      a,
      id,
      'the agent done',
      (l) => l.some((e) => isAgentMessage(e.event)) && isState(l.at(-1)!.event, 'awaiting_user_input'),
    );
    llm.enqueue(streamed(['Now yes.']));
    expect((await act(b, id, { type: 'message', content: 'four' })).status).toBe(202);
  }, 30_000);
});

describe('a client that disconnects mid-step', () => {
  it('cancels nothing: the step streams on and its answer is stored whole', async () => {
    const id = await createConversation(a.baseUrl);
    const client = await e2e.connect(b, id);
    const index = llm.requests.length;
    llm.enqueue(streamed(['Still ', 'here ', 'after ', 'you ', 'left.'], { gapMs: 200 }));
    client.sendMessage('hi');
    await client.waitUntil(() => deltasOf(client.frames).length >= 1, { what: 'a delta' });
    await client.terminate();
    const log = events(await eventsWhen(a, id, 'the answer', (l) => l.some((e) => isAgentMessage(e.event)), 15_000));
    expect(log.find(isAgentMessage)!.data).toMatchObject({ content: 'Still here after you left.' });
    expect(llm.requests[index]!.abandoned).toBe(false);
  }, 30_000);
});

function isState(event: StoredEvent, state: string): boolean {
  return event.type === 'agent_state_changed' && event.data.state === state;
}

function isAgentMessage(event: StoredEvent): event is Event<'message'> {
  return event.type === 'message' && event.source === 'agent';
}
