import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { failure, startFakeLlmServer, text, type FakeLlmServer, type FakeReply } from '../support/fakeLlmServer.ts';
import { eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor } from '../support/wsClient.ts';

const KEY = 'sk-test-e2e-DO-NOT-LEAK-91ab';
const usage = { prompt_tokens: 1000, completion_tokens: 100 };

const e2e = useE2e();
let llm: FakeLlmServer;
let server: ServerProcess;

beforeAll(async () => {
  llm = await startFakeLlmServer();
  e2e.onCleanup(() => llm.close());
  server = await e2e.start({
    env: {
      TETHER_LLM_BASE_URL: llm.baseUrl,
      TETHER_LLM_API_KEY: KEY,
      TETHER_LLM_MODEL: 'fake-model',
      TETHER_LLM_PRICE_PROMPT: '1',
    },
  });
}, 60_000);

async function create(body: Record<string, unknown>): Promise<string> {
  const created = await http<{ conversation_id: string }>(server.baseUrl, 'POST', '/api/conversations', body);
  expect(created.status).toBe(201);
  return created.body.conversation_id;
}

function lastState(events: LoggedEvent[]): string | undefined {
  const facts = events.filter((e) => e.event.type === 'agent_state_changed');
  const last = facts.at(-1)?.event;
  return last?.type === 'agent_state_changed' ? last.data.state : undefined;
}

function untilState(id: string, state: string): Promise<LoggedEvent[]> {
  return eventsWhen(
    server,
    id,
    `conversation ${id} to reach ${state}`,
    (events) => lastState(events) === state,
    30_000,
  );
}

/** A completion whose assistant message makes one call, with this id. */
function callReply(id: string, name: string, args: Record<string, unknown>): FakeReply {
  const tool_calls = [{ id, type: 'function', function: { name, arguments: JSON.stringify(args) } }];
  return {
    json: {
      choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls }, finish_reason: 'tool_calls' }],
      usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
    },
  };
}

type AgentAnswer = Extract<StoredEvent, { type: 'message' | 'command' | 'tool_call' | 'finish' }>;

const agentActions = (events: LoggedEvent[]): Array<{ type: string; data: object }> =>
  events
    .map((e) => e.event)
    .filter(
      (e): e is AgentAnswer =>
        e.source === 'agent' &&
        (e.type === 'message' || e.type === 'command' || e.type === 'tool_call' || e.type === 'finish'),
    )
    // The step's item and attempt are the conversation's own (a replay has other ids): the action is the rest.
    .map((e) => {
      const { item_id: _item, attempt: _attempt, deltas: _deltas, ...data } = e.data;
      return { type: e.type, data };
    });

describe('the LLM agent', () => {
  it('does a task of several steps (write a file, run it, read the output, finish), then its trajectory replays to the same actions without calling the LLM', async () => {
    const before = llm.requests.length;
    const script = 'echo "hello from $1" > out.txt\n';
    llm.enqueue(
      callReply('call_w', 'write_file', { path: 'hello.sh', content: script, security_risk: 'LOW' }),
      callReply('call_r', 'run_command', { command: 'bash hello.sh tether', security_risk: 'LOW' }),
      callReply('call_c', 'read_file', { path: 'out.txt' }),
      callReply('call_f', 'finish', { message: 'The script wrote: hello from tether.' }),
    );
    const task = 'Write hello.sh that greets its argument into out.txt, run it, and tell me what it wrote.';
    const id = await create({ initial_message: task, instructions: 'Work in small steps.' });
    const events = await untilState(id, 'finished');
    expect(llm.requests.length - before).toBe(4);

    // Only run_command is a shell command; the file tools ran on the workspace, each answered by a tool_result.
    const outputs = events.flatMap((e) => (e.event.type === 'command_output' ? [e.event.data] : []));
    expect(outputs).toEqual([
      expect.objectContaining({ command: 'bash hello.sh tether', exit_code: 0, call_id: 'call_r' }),
    ]);
    const calls = events.flatMap((e) => (e.event.type === 'tool_call' ? [e.event.data] : []));
    expect(calls.map((c) => [c.call_id, c.tool, c.arguments])).toEqual([
      ['call_w', 'write_file', { path: 'hello.sh', content: script, security_risk: 'LOW' }],
      ['call_c', 'read_file', { path: 'out.txt' }],
    ]);
    const results = events.flatMap((e) => (e.event.type === 'tool_result' ? [e.event.data] : []));
    expect(results).toEqual([
      { call_id: 'call_w', tool: 'write_file', output: `Wrote ${script.length} bytes to hello.sh.`, is_error: false },
      { call_id: 'call_c', tool: 'read_file', output: 'hello from tether\n', is_error: false },
    ]);
    expect(agentActions(events).map((a) => a.type)).toEqual(['tool_call', 'command', 'tool_call', 'finish']);
    expect(events.filter((e) => e.event.type === 'agent_usage')).toHaveLength(4);
    // The key authenticated the calls and appears nowhere Tether writes.
    expect(llm.requests.slice(before).every((r) => r.headers.authorization === `Bearer ${KEY}`)).toBe(true);
    const lastRequest = JSON.stringify(llm.requests.at(-1)!.body);
    expect(lastRequest).toContain('Work in small steps.');
    expect(lastRequest).toContain('hello from tether');
    expect(JSON.stringify(events)).not.toContain(KEY);
    expect(server.stderr()).not.toContain(KEY);

    // Replay: the same task from the recorded trajectory.
    const replayId = await create({ initial_message: task, replay: { items: events, has_more: false } });
    const replayed = await untilState(replayId, 'finished');
    expect(agentActions(replayed)).toEqual(agentActions(events));
    expect(llm.requests.length - before).toBe(4);
    const replayedResults = replayed.flatMap((e) => (e.event.type === 'tool_result' ? [e.event.data] : []));
    expect(replayedResults).toEqual(results);
    // The replayed calls really ran, in the new conversation's own workspace.
    expect(readFileSync(join(server.dataDir, 'workspaces', replayId, 'out.txt'), 'utf8')).toBe('hello from tether\n');
  }, 60_000);

  it('puts the agent in error and tells the clients when the LLM refuses the key', async () => {
    llm.enqueue(failure(401));
    const id = await create({});
    const client = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    await client.waitFor((f) => f.type === 'sync');
    client.sendMessage('hello?');
    await client.waitFor((f) => f.type === 'status' && f.id === 'STATUS$ERROR_LLM_AUTHENTICATION', {
      what: 'the status frame',
    });
    const events = await untilState(id, 'error');
    expect(events.find((e) => e.event.type === 'agent_error')?.event.data).toMatchObject({
      code: 'LLM_AUTHENTICATION',
    });
    await client.close();
  }, 30_000);

  it('waits in rate_limited and tries the step again when the LLM is rate limiting', async () => {
    llm.enqueue(
      failure(429, { 'retry-after-ms': '200' }),
      failure(429, { 'retry-after-ms': '200' }),
      text('Here I am.'),
    );
    const id = await create({ initial_message: 'are you there?' });
    const events = await untilState(id, 'awaiting_user_input');
    const states = events.flatMap((e) => (e.event.type === 'agent_state_changed' ? [e.event.data.state] : []));
    expect(states.filter((s) => s === 'rate_limited')).toHaveLength(2);
    expect(events.filter((e) => e.event.type === 'timeout')).toHaveLength(2);
    expect(agentActions(events)).toEqual([{ type: 'message', data: { content: 'Here I am.' } }]);
    // Each wait ended in the same step's next attempt, not in a new step: the answer is attempt 3.
    const retries = events.flatMap((e) => (e.event.type === 'agent_attempt' ? [e.event.data] : []));
    expect(retries.map((r) => [r.attempt, r.reason])).toEqual([
      [2, 'rate_limited'],
      [3, 'rate_limited'],
    ]);
    const answer = events.find((e) => e.event.source === 'agent' && e.event.type === 'message')!.event;
    expect(answer.data).toMatchObject({ attempt: 3, item_id: retries[0]!.item_id });
  }, 30_000);
});
