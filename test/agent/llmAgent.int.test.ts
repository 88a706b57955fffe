import { inspect } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  llmAgent,
  LlmAuthenticationError,
  LlmQuotaExceededError,
  LlmRateLimitError,
  LlmRequestError,
  LlmResponseError,
  LlmServerError,
  type AgentAction,
  type LlmAgentOptions,
  type LlmUsage,
} from '../../src/agent/index.ts';
import { StoredEvent } from '../../protocol/index.ts';
import { stepOver } from '../support/agentSteps.ts';
import { until } from '../support/until.ts';
import {
  failure,
  startFakeLlmServer,
  streamed,
  text,
  toolCall,
  type FakeLlmServer,
  type FakeReply,
} from '../support/fakeLlmServer.ts';

const KEY = 'sk-test-DO-NOT-LEAK-4f9c1e77';
/** Every 8-character piece of the key: an error must not hold even part of it. */
const keyPieces = Array.from({ length: KEY.length - 7 }, (_, i) => KEY.slice(i, i + 8));

type Draft = Pick<StoredEvent, 'source' | 'type' | 'data'> & { cause?: number };

/** Valid stored events with dense ids, as the log would stamp them. */
function history(...drafts: Draft[]): StoredEvent[] {
  return drafts.map((draft, id) =>
    StoredEvent.parse({ v: 1, id, conversation_id: 'c1', ts: '2025-01-01T00:00:00.000Z', ...draft }),
  );
}

const created = (instructions?: string): Draft => ({
  source: 'user',
  type: 'conversation_created',
  data: {
    user: 'local',
    confirmation_mode: false,
    max_iterations: 10,
    secret_names: [],
    replay: false,
    ...(instructions !== undefined && { instructions }),
  },
});
const userSays = (content: string): Draft => ({ source: 'user', type: 'message', data: { content } });
const agentSays = (content: string): Draft => ({ source: 'agent', type: 'message', data: { content } });
const agentFinishes = (content: string): Draft => ({ source: 'agent', type: 'finish', data: { content } });
const runs = (source: 'agent' | 'user', command: string): Draft => ({ source, type: 'command', data: { command } });
const output = (
  cause: number,
  command: string,
  out: string,
  exit_code: number | null = 0,
  call_id?: string,
): Draft => ({
  source: 'environment',
  type: 'command_output',
  cause,
  data: { command, exit_code, output: out, timed_out: false, truncated: false, ...(call_id && { call_id }) },
});
const stateChanged: Draft = { source: 'environment', type: 'agent_state_changed', data: { state: 'running' } };

let server: FakeLlmServer;

beforeEach(async () => {
  server = await startFakeLlmServer();
});

afterEach(async () => {
  await server.close();
});

function agent(options: Partial<LlmAgentOptions> = {}) {
  return llmAgent({ baseUrl: server.baseUrl, model: 'fake-model', apiKey: KEY, ...options });
}

async function stepWith(
  reply: FakeReply,
  events: StoredEvent[] = history(created(), userSays('hi')),
): Promise<AgentAction> {
  server.enqueue(reply);
  return stepOver(agent(), events);
}

async function failWith(options: Partial<LlmAgentOptions>, ...replies: FakeReply[]): Promise<unknown> {
  return (await streamFailure(options, ...replies)).err;
}

/** One step that must fail, with the deltas it reported before. */
async function streamFailure(
  options: Partial<LlmAgentOptions>,
  ...replies: FakeReply[]
): Promise<{ err: unknown; deltas: string[] }> {
  server.enqueue(...replies);
  const deltas: string[] = [];
  const onDelta = (text: string) => deltas.push(text);
  const err = await stepOver(agent(options), history(created(), userSays('hi')), { onDelta }).then(
    (action) => expect.fail(`expected a rejection, got ${JSON.stringify(action)}`),
    (err: unknown) => err,
  );
  return { err, deltas };
}

/** One step with `reply`, and the deltas it reported. */
async function streamStep(
  reply: FakeReply,
  options: Partial<LlmAgentOptions> = {},
): Promise<{ action: AgentAction; deltas: string[] }> {
  server.enqueue(reply);
  const deltas: string[] = [];
  const action = await stepOver(agent(options), history(created(), userSays('hi')), {
    onDelta: (text) => deltas.push(text),
  });
  return { action, deltas };
}

/** A fetch whose answer body arrives one byte per chunk: every split an SSE parser can meet. */
const byteByByte: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  const bytes = new Uint8Array(await res.arrayBuffer());
  let at = 0;
  const body = new ReadableStream<Uint8Array>({
    pull: (controller) => {
      if (at < bytes.length) controller.enqueue(bytes.slice(at, ++at));
      else controller.close();
    },
  });
  return new Response(body, { status: res.status, headers: res.headers });
};

describe('llmAgent requests', () => {
  it('posts the model, the five tools and tool_choice auto to /chat/completions with the key as a bearer token', async () => {
    await stepWith(text('hello'));
    const [request] = server.requests;
    expect(request?.method).toBe('POST');
    expect(request?.url).toBe('/v1/chat/completions');
    expect(request?.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(request?.body.model).toBe('fake-model');
    expect(request?.body.tool_choice).toBe('auto');
    expect(request?.body.stream).toBe(true);
    expect(request?.body.stream_options).toEqual({ include_usage: true });
    const names = request?.body.tools.map(
      (t: { type: string; function: { name: string } }) => `${t.type}:${t.function.name}`,
    );
    expect(names).toEqual([
      'function:run_command',
      'function:read_file',
      'function:write_file',
      'function:ask_user',
      'function:finish',
    ]);
  });

  it('makes run_command and write_file, the built-in tools that act, require a security_risk of LOW, MEDIUM or HIGH', async () => {
    await stepWith(text('hello'));
    const tools: { function: { name: string; parameters: { properties: object; required: string[] } } }[] =
      server.requests[0]?.body.tools;
    const required = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters.required]));
    expect(required).toEqual({
      run_command: ['command', 'security_risk'],
      read_file: ['path'],
      write_file: ['path', 'content', 'security_risk'],
      ask_user: ['question'],
      finish: ['message'],
    });
    for (const name of ['run_command', 'write_file']) {
      const { properties } = tools.find((t) => t.function.name === name)!.function.parameters;
      expect(properties).toHaveProperty(
        'security_risk',
        expect.objectContaining({ type: 'string', enum: ['LOW', 'MEDIUM', 'HIGH'] }),
      );
    }
  });

  it("offers the MCP tools of the last tools_listed as <server>__<tool>, with the tool's schema and a required security_risk", async () => {
    const search = {
      name: 'search',
      description: 'Search the docs.',
      input_schema: {
        type: 'object',
        properties: { query: { type: 'string' }, limit: { type: 'integer' } },
        required: ['query'],
      },
    };
    const listed = (servers: { name: string; tools: (typeof search)[] }[]): Draft => ({
      source: 'environment',
      type: 'tools_listed',
      data: { servers },
    });
    const events = history(
      created(),
      listed([{ name: 'old', tools: [{ ...search, name: 'gone' }] }]),
      userSays('hi'),
      listed([{ name: 'docs', tools: [search] }]),
    );
    await stepWith(text('ok'), events);
    const tools: { type: string; function: { name: string } }[] = server.requests[0]?.body.tools;
    expect(tools.map((t) => t.function.name)).toEqual([
      'run_command',
      'read_file',
      'write_file',
      'ask_user',
      'finish',
      'docs__search',
    ]);
    expect(tools.at(-1)).toEqual({
      type: 'function',
      function: {
        name: 'docs__search',
        description: 'Search the docs.',
        parameters: {
          type: 'object',
          properties: {
            query: { type: 'string' },
            limit: { type: 'integer' },
            security_risk: expect.objectContaining({ enum: ['LOW', 'MEDIUM', 'HIGH'] }),
          },
          required: ['query', 'security_risk'],
        },
      },
    });
  });

  it('with stream: false, posts the plain request without stream or stream_options', async () => {
    server.enqueue(text('hello'));
    await stepOver(agent({ stream: false }), history(created(), userSays('hi')));
    expect(Object.keys(server.requests[0]?.body)).toEqual(['model', 'messages', 'tools', 'tool_choice']);
  });

  it('accepts a base URL with a trailing slash', async () => {
    server.enqueue(text('hello'));
    await stepOver(llmAgent({ baseUrl: `${server.baseUrl}/`, model: 'm', apiKey: KEY }), history(created()));
    expect(server.requests[0]?.url).toBe('/v1/chat/completions');
  });
});

describe('llmAgent turns replies into actions', () => {
  /** A completion whose assistant message makes these calls, in this order. */
  const replyCalling = (...calls: { id?: string; name: string; arguments: string }[]): FakeReply => ({
    json: {
      choices: [
        {
          message: {
            role: 'assistant',
            content: null,
            tool_calls: calls.map(({ id, name, arguments: args }) => ({
              ...(id !== undefined && { id }),
              type: 'function',
              function: { name, arguments: args },
            })),
          },
        },
      ],
    },
  });

  it('turns a run_command call into a call with the command and its rating as given', async () => {
    const args = { command: 'ls -la | wc -l', security_risk: 'LOW' };
    expect(await stepWith(toolCall('run_command', args))).toEqual({
      type: 'calls',
      calls: [{ id: 'call_x', name: 'run_command', arguments: args }],
    });
  });

  it('passes a read_file call on as a call with its path exactly as the model sent it', async () => {
    const path = `-odd 'name' "$HOME" \`x\`.txt`;
    expect(await stepWith(toolCall('read_file', { path }))).toEqual({
      type: 'calls',
      calls: [{ id: 'call_x', name: 'read_file', arguments: { path } }],
    });
  });

  const nasty: [string, string][] = [
    ['quotes', `it's a "quoted" 'string' with '\\'' inside`],
    ['expansions', '$HOME ${PATH} $(echo pwned) `echo pwned` $((1+1)) !! ~'],
    ['delimiter-like lines', "line\nEOF\nTETHER_EOF\n'EOF'\nEOF"],
    ['no trailing newline', 'last line without newline'],
    ['trailing and leading newlines', '\n\nbody\n\n\n'],
    ['printf escapes', 'back\\slash \\n %s %d %% \\x41 \\0'],
    ['JSON-like content', '{"path":"other.txt","content":"x"}\\u0000 \\"'],
    ['option-like content', '-n'],
    ['empty content', ''],
    ['unicode, tabs and CRLF', 'héllo ✓ 日本語 🎉\ttab\r\ncrlf\r\n'],
  ];

  it.each(nasty)('passes write_file content with %s on byte for byte, plain or streamed', async (_label, content) => {
    const path = `new dir/it's "odd" $x/file.txt`;
    const args = { path, content, security_risk: 'MEDIUM' };
    const expected = { type: 'calls', calls: [{ id: 'call_x', name: 'write_file', arguments: args }] };
    const plain = await stepWith(toolCall('write_file', args));
    expect(plain).toEqual(expected);
    // Streamed, the arguments arrive in pieces that may split an escape or a character.
    const { action } = await streamStep(streamed([], { toolCall: { name: 'write_file', args } }));
    expect(action).toEqual(expected);
    for (const made of [plain, action]) {
      const call = made.type === 'calls' ? made.calls[0] : undefined;
      expect(Buffer.from(String(call?.arguments.content), 'utf8').equals(Buffer.from(content, 'utf8'))).toBe(true);
    }
  });

  it('turns ask_user alone into a message that waits for the user, with the call id', async () => {
    expect(await stepWith(toolCall('ask_user', { question: 'Which branch?' }))).toEqual({
      type: 'message',
      content: 'Which branch?',
      callId: 'call_x',
    });
  });

  it('passes ask_user without a question on as a call, to be answered with an error', async () => {
    expect(await stepWith(toolCall('ask_user', { question: '  ' }))).toEqual({
      type: 'calls',
      calls: [{ id: 'call_x', name: 'ask_user', arguments: { question: '  ' } }],
    });
  });

  it('turns finish alone into a finish action with its message and the call id', async () => {
    expect(await stepWith(toolCall('finish', { message: 'All tests pass.' }))).toEqual({
      type: 'finish',
      content: 'All tests pass.',
      callId: 'call_x',
    });
  });

  it('turns a plain text reply into a message', async () => {
    expect(await stepWith(text('  Hello there.  '))).toEqual({ type: 'message', content: 'Hello there.' });
  });

  it('keeps every call of a reply, in order, with its id', async () => {
    const reply = replyCalling(
      { id: 'b', name: 'run_command', arguments: '{"command":"first","security_risk":"LOW"}' },
      { id: 'a', name: 'write_file', arguments: '{"path":"x","content":"y"}' },
      { id: 'c', name: 'run_command', arguments: '{"command":"third"}' },
    );
    expect(await stepWith(reply)).toEqual({
      type: 'calls',
      calls: [
        { id: 'b', name: 'run_command', arguments: { command: 'first', security_risk: 'LOW' } },
        { id: 'a', name: 'write_file', arguments: { path: 'x', content: 'y' } },
        { id: 'c', name: 'run_command', arguments: { command: 'third' } },
      ],
    });
  });

  it('gives a call the model sent without an id an id of its own, another for each call', async () => {
    const reply = replyCalling(
      { name: 'run_command', arguments: '{"command":"one"}' },
      { name: 'run_command', arguments: '{"command":"two"}' },
    );
    const action = await stepWith(reply);
    if (action.type !== 'calls') expect.fail(`expected calls, got ${JSON.stringify(action)}`);
    const ids = action.calls.map((c) => c.id);
    expect(ids).toEqual([expect.stringMatching(/^call_./), expect.stringMatching(/^call_./)]);
    expect(new Set(ids).size).toBe(2);
  });

  it.each<[string, FakeReply, { name: string; arguments: Record<string, unknown> }[]]>([
    [
      'a call of an unknown tool',
      toolCall('delete_everything', { all: true }),
      [{ name: 'delete_everything', arguments: { all: true } }],
    ],
    [
      'write_file without a path',
      toolCall('write_file', { content: 'x' }),
      [{ name: 'write_file', arguments: { content: 'x' } }],
    ],
    [
      'a call without arguments',
      replyCalling({ id: 'call_x', name: 'read_file', arguments: '' }),
      [{ name: 'read_file', arguments: {} }],
    ],
    [
      'ask_user among other calls',
      replyCalling(
        { id: 'call_x', name: 'run_command', arguments: '{"command":"ls"}' },
        { id: 'call_y', name: 'ask_user', arguments: '{"question":"ok?"}' },
      ),
      [
        { name: 'run_command', arguments: { command: 'ls' } },
        { name: 'ask_user', arguments: { question: 'ok?' } },
      ],
    ],
    [
      'finish among other calls',
      replyCalling(
        { id: 'call_x', name: 'finish', arguments: '{"message":"done"}' },
        { id: 'call_y', name: 'finish', arguments: '{"message":"really"}' },
      ),
      [
        { name: 'finish', arguments: { message: 'done' } },
        { name: 'finish', arguments: { message: 'really' } },
      ],
    ],
  ])('passes %s on as calls for the session to answer, not as an error', async (_label, reply, calls) => {
    const action = await stepWith(reply);
    expect(action).toEqual({
      type: 'calls',
      calls: calls.map((call, n) => ({ id: n === 0 ? 'call_x' : 'call_y', ...call })),
    });
  });

  it('passes a streamed call of an unknown tool on as a call, with the streamed text as its thought', async () => {
    const { action } = await streamStep(streamed(['hm'], { toolCall: { name: 'delete_everything', args: {} } }));
    expect(action).toEqual({
      type: 'calls',
      calls: [{ id: 'call_x', name: 'delete_everything', arguments: {} }],
      thought: 'hm',
    });
  });

  it('reports token usage and its cost for each step', async () => {
    const seen: LlmUsage[] = [];
    server.enqueue(toolCall('finish', { message: 'ok' }, { prompt_tokens: 1_000, completion_tokens: 200 }));
    const llm = agent({
      pricing: { promptUsdPerMillion: 2, completionUsdPerMillion: 10 },
      onUsage: (u) => seen.push(u),
    });
    expect(llm.lastUsage).toBeNull();
    await stepOver(llm, history(created()), { conversationId: 'c7' });
    const expected = {
      conversationId: 'c7',
      model: 'fake-model',
      promptTokens: 1_000,
      completionTokens: 200,
      costUsd: 0.004,
    };
    expect(seen).toEqual([expected]);
    expect(llm.lastUsage).toEqual(expected);
  });
});

describe('llmAgent maps history to chat messages', () => {
  it("puts the conversation's instructions in the system prompt", async () => {
    await stepWith(text('ok'), history(created('Always answer in French.'), userSays('hi')));
    const [system] = server.requests[0]!.body.messages;
    expect(system.role).toBe('system');
    expect(system.content).toContain('Instructions for this conversation:\nAlways answer in French.');
  });

  it('sends each agent command as a tool call (call_<id> when stored without call_id) followed by its own output, and user commands as notes', async () => {
    const events = history(
      created(), // 0
      userSays('count the files'), // 1
      stateChanged, // 2
      runs('agent', 'ls | wc -l'), // 3
      output(3, 'ls | wc -l', '42\n'), // 4
      agentSays('There are 42.'), // 5
      runs('user', 'touch x'), // 6
      output(6, 'touch x', ''), // 7
      runs('agent', 'make'), // 8
      userSays('also run the tests'), // 9: arrives while make runs
      output(8, 'make', 'boom', 2), // 10
      agentFinishes('make failed'), // 11
    );
    await stepWith(text('ok'), events);
    const [, ...messages] = server.requests[0]!.body.messages;
    expect(messages).toEqual([
      { role: 'user', content: 'count the files' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_3', type: 'function', function: { name: 'run_command', arguments: '{"command":"ls | wc -l"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_3', content: 'Exit code: 0\nOutput:\n42\n' },
      { role: 'assistant', content: 'There are 42.' },
      { role: 'user', content: '[workspace] I ran this command myself:\n```\ntouch x\n```' },
      { role: 'user', content: '[workspace] Result of my command `touch x`:\nExit code: 0\n(no output)' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_8', type: 'function', function: { name: 'run_command', arguments: '{"command":"make"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_8', content: 'Exit code: 2\nOutput:\nboom' },
      { role: 'user', content: 'also run the tests' },
      { role: 'assistant', content: 'make failed' },
    ]);
  });

  /** One agent call of the reply to step 1 (the user's message), attempt 1. */
  const reply = { item_id: 'item-1', attempt: 1 };
  const agentRuns = (command: string, call_id: string, more: object = {}): Draft => ({
    source: 'agent',
    type: 'command',
    cause: 1,
    data: { command, call_id, ...reply, ...more },
  });
  const agentCalls = (tool: string, call_id: string, args: Record<string, unknown>, more: object = {}): Draft => ({
    source: 'agent',
    type: 'tool_call',
    cause: 1,
    data: { call_id, tool, arguments: args, ...reply, ...more },
  });
  const toolResult = (cause: number, call_id: string, tool: string, out: string, is_error = false): Draft => ({
    source: 'environment',
    type: 'tool_result',
    cause,
    data: { call_id, tool, output: out, is_error },
  });
  const call = (id: string, name: string, args: string) => ({
    id,
    type: 'function',
    function: { name, arguments: args },
  });

  it("sends the calls of one reply as one assistant message, then each call's result in call order, wherever it was stored", async () => {
    const events = history(
      created(), // 0
      userSays('look around'), // 1
      agentRuns('ls', 'tc_run', { security_risk: 'LOW', thought: 'Two things.' }), // 2
      agentCalls('read_file', 'tc_read', { path: 'a.txt' }), // 3
      userSays('hurry up'), // 4: arrives while the calls run
      output(2, 'ls', 'a.txt\n', 0, 'tc_run'), // 5
      toolResult(3, 'tc_read', 'read_file', 'A\n'), // 6
    );
    await stepWith(text('ok'), events);
    const [, ...messages] = server.requests[0]!.body.messages;
    expect(messages).toEqual([
      { role: 'user', content: 'look around' },
      {
        role: 'assistant',
        content: 'Two things.',
        tool_calls: [
          call('tc_run', 'run_command', '{"command":"ls","security_risk":"LOW"}'),
          call('tc_read', 'read_file', '{"path":"a.txt"}'),
        ],
      },
      { role: 'tool', tool_call_id: 'tc_run', content: 'Exit code: 0\nOutput:\na.txt\n' },
      { role: 'tool', tool_call_id: 'tc_read', content: 'A\n' },
      { role: 'user', content: 'hurry up' },
    ]);
  });

  it('sends calls of different replies (another attempt, another step) as assistant messages of their own', async () => {
    const events = history(
      created(), // 0
      userSays('go'), // 1
      agentRuns('one', 'tc_1'), // 2
      agentRuns('two', 'tc_2', { attempt: 2 }), // 3
      agentCalls('read_file', 'tc_3', { path: 'x' }, { item_id: 'item-2' }), // 4
    );
    await stepWith(text('ok'), events);
    const assistants = server.requests[0]!.body.messages.filter((m: { role: string }) => m.role === 'assistant');
    expect(assistants.map((m: { tool_calls: { id: string }[] }) => m.tool_calls.map((c) => c.id))).toEqual([
      ['tc_1'],
      ['tc_2'],
      ['tc_3'],
    ]);
  });

  it('sends a tool_result that is an error with an "Error: " prefix, and a call without result a placeholder', async () => {
    const events = history(
      created(), // 0
      userSays('go'), // 1
      agentCalls('write_file', 'tc_w', { path: '/etc/passwd', content: 'x', security_risk: 'HIGH' }), // 2
      agentCalls('docs__search', 'tc_s', { query: 'q' }), // 3
      toolResult(2, 'tc_w', 'write_file', 'Cannot write /etc/passwd: it is outside the workspace.', true), // 4
    );
    await stepWith(text('ok'), events);
    expect(server.requests[0]!.body.messages.slice(-2)).toEqual([
      { role: 'tool', tool_call_id: 'tc_w', content: 'Error: Cannot write /etc/passwd: it is outside the workspace.' },
      { role: 'tool', tool_call_id: 'tc_s', content: 'No result was recorded for this call.' },
    ]);
  });

  it('keeps the stored call_id of a command, and gives an old-log command without one call_<event id>', async () => {
    const events = history(
      created(), // 0
      userSays('go'), // 1
      runs('agent', 'old'), // 2: stored before call ids
      output(2, 'old', ''), // 3
      agentRuns('new', 'tc_new'), // 4
      output(4, 'new', ''), // 5
    );
    await stepWith(text('ok'), events);
    const ids = server.requests[0]!.body.messages.flatMap(
      (m: { tool_calls?: { id: string }[]; tool_call_id?: string }) =>
        m.tool_calls ? m.tool_calls.map((c) => c.id) : m.tool_call_id ? [m.tool_call_id] : [],
    );
    expect(ids).toEqual(['call_2', 'call_2', 'tc_new', 'tc_new']);
  });

  it('sends an agent message or finish made from ask_user or finish as that call, answered at once', async () => {
    const events = history(
      created(), // 0
      userSays('go'), // 1
      { source: 'agent', type: 'message', cause: 1, data: { content: 'Which branch?', call_id: 'tc_ask', ...reply } }, // 2
      userSays('main'), // 3
      { source: 'agent', type: 'finish', cause: 3, data: { content: 'Merged.', call_id: 'tc_fin', thought: 'So.' } }, // 4
      userSays('thanks'), // 5
    );
    await stepWith(text('ok'), events);
    const [, ...messages] = server.requests[0]!.body.messages;
    expect(messages).toEqual([
      { role: 'user', content: 'go' },
      { role: 'assistant', content: null, tool_calls: [call('tc_ask', 'ask_user', '{"question":"Which branch?"}')] },
      {
        role: 'tool',
        tool_call_id: 'tc_ask',
        content: 'The question was shown to the user; their answer is their next message.',
      },
      { role: 'user', content: 'main' },
      { role: 'assistant', content: 'So.', tool_calls: [call('tc_fin', 'finish', '{"message":"Merged."}')] },
      { role: 'tool', tool_call_id: 'tc_fin', content: 'The user was told that the task is done.' },
      { role: 'user', content: 'thanks' },
    ]);
  });

  it('answers a command whose output was never recorded with a placeholder result', async () => {
    await stepWith(text('ok'), history(created(), userSays('go'), runs('agent', 'sleep 100'), userSays('hello?')));
    const messages = server.requests[0]?.body.messages;
    expect(messages.slice(-2)).toEqual([
      { role: 'tool', tool_call_id: 'call_2', content: 'No result was recorded for this command.' },
      { role: 'user', content: 'hello?' },
    ]);
  });

  it('shortens a long output in the middle, keeping its start and its end', async () => {
    const long = `START${'x'.repeat(50_000)}END`;
    server.enqueue(text('ok'));
    await stepOver(
      agent({ maxOutputChars: 1_000 }),
      history(created(), userSays('go'), runs('agent', 'cat big'), output(2, 'cat big', long)),
    );
    const tool = server.requests[0]?.body.messages.at(-1);
    expect(tool.content.startsWith('Exit code: 0\nOutput:\nSTART')).toBe(true);
    expect(tool.content.endsWith('END')).toBe(true);
    expect(tool.content).toContain(`[... ${long.length - 1_000} characters left out ...]`);
    expect(tool.content.length).toBeLessThan(1_200);
  });

  it('sends the same messages for the same history', async () => {
    const events = history(created('be brief'), userSays('go'), runs('agent', 'ls'), output(2, 'ls', 'a\nb\n'));
    await stepWith(text('one'), events);
    await stepWith(text('two'), events);
    expect(server.requests[1]?.body.messages).toEqual(server.requests[0]?.body.messages);
  });
});

describe('llmAgent streams its reply', () => {
  it('hands every text delta to onDelta, and the deltas joined are the message, not trimmed', async () => {
    const { action, deltas } = await streamStep(streamed([' Hel', 'lo', '', ' there.\n'], { gapMs: 2 }));
    expect(deltas).toEqual([' Hel', 'lo', ' there.\n']);
    expect(action).toEqual({ type: 'message', content: ' Hello there.\n' });
  });

  it("keeps the text streamed with a tool call as the action's thought", async () => {
    const { action, deltas } = await streamStep(
      streamed(['Let me ', 'look.\n'], { gapMs: 1, toolCall: { name: 'run_command', args: { command: 'ls -la' } } }),
    );
    expect(action).toEqual({
      type: 'calls',
      calls: [{ id: 'call_x', name: 'run_command', arguments: { command: 'ls -la' } }],
      thought: 'Let me look.\n',
    });
    expect(deltas.join('')).toBe(action.thought);
  });

  it('gives a tool call streamed without text no thought and reports no delta', async () => {
    const { action, deltas } = await streamStep(
      streamed([], { toolCall: { name: 'finish', args: { message: 'All done.' } } }),
    );
    expect(action).toEqual({ type: 'finish', content: 'All done.', callId: 'call_x' });
    expect(deltas).toEqual([]);
  });

  it('reports the usage of the stream, asked for with stream_options, and its cost', async () => {
    const seen: LlmUsage[] = [];
    const { action } = await streamStep(streamed(['ok'], { usage: { prompt_tokens: 1_000, completion_tokens: 200 } }), {
      pricing: { promptUsdPerMillion: 2, completionUsdPerMillion: 10 },
      onUsage: (u) => seen.push(u),
    });
    expect(action.usage).toEqual({ prompt_tokens: 1_000, completion_tokens: 200, cost: 0.004 });
    expect(seen).toEqual([
      { conversationId: 'c1', model: 'fake-model', promptTokens: 1_000, completionTokens: 200, costUsd: 0.004 },
    ]);
  });

  it('asks again at once without stream_options when they are refused, and leaves them out of later steps', async () => {
    server.refuseStreamOptions = true;
    const usage = { prompt_tokens: 10, completion_tokens: 2 };
    server.enqueue(streamed(['one'], { usage }), streamed(['two'], { usage }));
    const llm = agent();
    expect(await stepOver(llm, history(created(), userSays('hi')))).toEqual({ type: 'message', content: 'one' });
    expect(await stepOver(llm, history(created(), userSays('hi')))).toEqual({ type: 'message', content: 'two' });
    const sent = server.requests.map((r) => ({ stream: r.body.stream, options: r.body.stream_options }));
    expect(sent).toEqual([
      { stream: true, options: { include_usage: true } },
      { stream: true, options: undefined },
      { stream: true, options: undefined },
    ]);
    expect(llm.lastUsage).toBeNull();
  });

  it('keeps sending stream_options when the request asked again without them is refused too', async () => {
    const unknown = failure(400, {}, "Unknown parameter: 'temperature_x'");
    server.enqueue(unknown, unknown, streamed(['ok']));
    const llm = agent();
    await expect(stepOver(llm, history(created()))).rejects.toBeInstanceOf(LlmRequestError);
    await stepOver(llm, history(created()));
    const sent = server.requests.map((r): unknown => r.body.stream_options);
    expect(sent).toEqual([{ include_usage: true }, undefined, { include_usage: true }]);
  });

  it('reads an event stream cut into single bytes, with comments, CRLF, other fields and multi-byte text', async () => {
    const chunk = (delta: unknown, finish: string | null = null) =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\r\n\r\n`;
    const body = [
      ': keep-alive\r\n\r\n',
      'event: message\r\nid: 1\r\n',
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: 'héllo ✓ 日本語 🎉' }),
      chunk({
        tool_calls: [{ index: 1, id: 'b', function: { name: 'run_command', arguments: '{"command":"second"}' } }],
      }),
      chunk({ tool_calls: [{ index: 0, id: 'a', function: { name: 'run_', arguments: '{"comm' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { name: 'command', arguments: 'and":"first"}' } }] }),
      chunk({}, 'tool_calls'),
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 4 } })}\r\n\r\n`,
      'data: [DONE]\r\n\r\n',
    ].join('');
    const { action, deltas } = await streamStep(
      { raw: body, headers: { 'content-type': 'text/event-stream; charset=utf-8' } },
      { fetch: byteByByte },
    );
    // The calls in the order of their index, not of their first chunk.
    expect(action).toEqual({
      type: 'calls',
      calls: [
        { id: 'a', name: 'run_command', arguments: { command: 'first' } },
        { id: 'b', name: 'run_command', arguments: { command: 'second' } },
      ],
      thought: 'héllo ✓ 日本語 🎉',
      usage: { prompt_tokens: 3, completion_tokens: 4, cost: 0 },
    });
    expect(deltas.join('')).toBe('héllo ✓ 日本語 🎉');
  });

  it('reads an answer that is JSON all the same as one delta holding its whole text', async () => {
    const { action, deltas } = await streamStep(text('  Hello there.  '));
    expect(action).toEqual({ type: 'message', content: 'Hello there.' });
    expect(deltas).toEqual(['Hello there.']);
  });

  it('with stream: false, reads the plain completion and reports no delta', async () => {
    const { action, deltas } = await streamStep(text('  Hello there.  '), { stream: false });
    expect(action).toEqual({ type: 'message', content: 'Hello there.' });
    expect(deltas).toEqual([]);
    expect(server.requests[0]?.body.stream).toBeUndefined();
  });

  it.each([
    ['resets the connection', false],
    ['ends the body', true],
  ])(
    'throws LlmServerError stream_cut when the stream %s before its end, after reporting the deltas that came',
    async (_label, cutCleanly) => {
      const { err, deltas } = await streamFailure({}, streamed(['a', 'b', 'c'], { cutAfter: 2, cutCleanly }));
      expect(err).toBeInstanceOf(LlmServerError);
      expect(err).toMatchObject({ code: 'LLM_SERVER_ERROR', reason: 'stream_cut', status: null, attempts: 1 });
      expect(deltas).toEqual(['a', 'b']);
      expect(server.requests).toHaveLength(1);
    },
  );

  it('throws LlmRateLimitError with the default wait on a rate-limit error inside the stream', async () => {
    const { err, deltas } = await streamFailure(
      { defaultRetryAfterMs: 250 },
      streamed(['a', 'b'], { rateLimitAfter: 1 }),
    );
    expect(err).toBeInstanceOf(LlmRateLimitError);
    expect(err).toMatchObject({ code: 'LLM_RATE_LIMITED', retryAfterMs: 250 });
    expect((err as Error).message).toContain('Rate limit reached for requests');
    expect(deltas).toEqual(['a']);
    expect(server.requests).toHaveLength(1);
  });

  it.each<[string, Record<string, unknown>]>([
    ['a code', { message: 'slow down', code: 'rate_limit_exceeded' }],
    ['a type', { message: 'slow down', type: 'rate_limit_error' }],
    ['a status', { message: 'slow down', status: 429 }],
    ['a numeric code', { message: 'slow down', code: 429 }],
  ])('knows a rate-limit error event by %s', async (_label, error) => {
    const err = await failWith({}, streamed(['a'], { errorAfter: { after: 1, error } }));
    expect(err).toBeInstanceOf(LlmRateLimitError);
    expect(err).toMatchObject({ retryAfterMs: 1_000 });
  });

  it('throws LlmServerError server_error on another error inside the stream', async () => {
    const error = { message: 'The server had an error while processing your request.', type: 'server_error' };
    const err = await failWith({}, streamed(['a'], { errorAfter: { after: 1, error } }));
    expect(err).toBeInstanceOf(LlmServerError);
    expect(err).toMatchObject({ reason: 'server_error', status: null, attempts: 1 });
    expect((err as Error).message).toContain('The server had an error');
  });
});

describe('llmAgent errors', () => {
  it.each([401, 403])('throws LlmAuthenticationError on HTTP %i', async (status) => {
    const err = await failWith({}, failure(status));
    expect(err).toBeInstanceOf(LlmAuthenticationError);
    expect(err).toMatchObject({ name: 'LlmAuthenticationError', code: 'LLM_AUTHENTICATION', status });
    expect(server.requests).toHaveLength(1);
  });

  it.each<[string, Record<string, string>, number]>([
    ['Retry-After seconds', { 'retry-after': '7' }, 7_000],
    ['retry-after-ms', { 'retry-after-ms': '250', 'retry-after': '9' }, 250],
    ['a Retry-After date', { 'retry-after': 'Wed, 01 Jan 2025 00:00:30 GMT' }, 30_000],
    ['no header', {}, 1_000],
  ])('throws LlmRateLimitError on 429 at once, waiting as %s says', async (_label, headers, retryAfterMs) => {
    const now = () => Date.parse('2025-01-01T00:00:00Z');
    const err = await failWith({ now }, failure(429, headers));
    expect(err).toBeInstanceOf(LlmRateLimitError);
    expect(err).toMatchObject({ code: 'LLM_RATE_LIMITED', retryAfterMs });
    expect(server.requests).toHaveLength(1);
  });

  it('throws LlmQuotaExceededError on a 429 that says the quota is used up', async () => {
    const err = await failWith(
      {},
      failure(429, { 'retry-after': '1' }, 'You exceeded your current quota', 'insufficient_quota'),
    );
    expect(err).toBeInstanceOf(LlmQuotaExceededError);
    expect(err).toMatchObject({ code: 'LLM_QUOTA_EXCEEDED' });
  });

  it.each([
    [500, true],
    [502, true],
    [503, false],
    [408, false],
  ])('throws LlmServerError server_error on HTTP %i after one request (stream: %s)', async (status, stream) => {
    const err = await failWith({ stream }, failure(status), text('never asked for'));
    expect(err).toBeInstanceOf(LlmServerError);
    expect(err).toMatchObject({ code: 'LLM_SERVER_ERROR', reason: 'server_error', status, attempts: 1 });
    expect((err as Error).message).toContain(`fake failure ${status}`);
    expect(server.requests).toHaveLength(1);
  });

  it.each([true, false])('throws LlmServerError network on a dropped connection (stream: %s)', async (stream) => {
    const err = await failWith({ stream }, { drop: true }, text('never asked for'));
    expect(err).toBeInstanceOf(LlmServerError);
    expect(err).toMatchObject({ reason: 'network', status: null, attempts: 1 });
    expect(server.requests).toHaveLength(1);
  });

  it('throws LlmServerError network when no answer comes within timeoutMs', async () => {
    const err = await failWith({ timeoutMs: 200 }, { hang: true });
    expect(err).toBeInstanceOf(LlmServerError);
    expect(err).toMatchObject({ reason: 'network', status: null });
    expect((err as Error).message).toContain('timed out');
    expect(server.requests).toHaveLength(1);
  });

  it('throws LlmServerError stream_cut when the stream outlasts timeoutMs', async () => {
    const { err, deltas } = await streamFailure({ timeoutMs: 300 }, streamed(['a', 'b'], { gapMs: 10_000 }));
    expect(err).toBeInstanceOf(LlmServerError);
    expect(err).toMatchObject({ reason: 'stream_cut', status: null });
    expect((err as Error).message).toContain('timed out');
    expect(deltas).toEqual(['a']);
  });

  it('throws LlmServerError stream_cut when a plain answer breaks off after its status', async () => {
    // The fake streams whatever the request asked: a reset in the middle of the body it reads whole.
    const err = await failWith({ stream: false }, streamed(['a', 'b'], { cutAfter: 1 }));
    expect(err).toBeInstanceOf(LlmServerError);
    expect(err).toMatchObject({ reason: 'stream_cut', status: null });
  });

  it('throws LlmRequestError with the provider message on another 4xx, without asking again', async () => {
    const err = await failWith({}, failure(400, {}, "This model's maximum context length is 8192 tokens"));
    expect(err).toBeInstanceOf(LlmRequestError);
    expect(err).toMatchObject({ code: 'LLM_REQUEST_REJECTED', status: 400 });
    expect((err as Error).message).toContain('maximum context length is 8192 tokens');
    expect(server.requests).toHaveLength(1);
  });

  it.each<[string, FakeReply]>([
    ['a body that is not JSON', { raw: '<html>gateway</html>' }],
    ['JSON without choices', { json: { object: 'chat.completion' } }],
    ['an empty reply', text('   ')],
    ['an empty streamed reply', streamed([' ', '\n'])],
    [
      'a stream event that is not JSON',
      { raw: 'data: {"choices": [\n\n', headers: { 'content-type': 'text/event-stream' } },
    ],
    [
      'arguments that are not JSON',
      {
        json: {
          choices: [{ message: { tool_calls: [{ function: { name: 'run_command', arguments: '{"command":' } }] } }],
        },
      },
    ],
    [
      'arguments that are JSON but not an object',
      {
        json: {
          choices: [{ message: { tool_calls: [{ id: 'a', function: { name: 'read_file', arguments: '["x"]' } }] } }],
        },
      },
    ],
    [
      'one call among several whose arguments are not JSON',
      {
        json: {
          choices: [
            {
              message: {
                tool_calls: [
                  { id: 'a', function: { name: 'read_file', arguments: '{"path":"x"}' } },
                  { id: 'b', function: { name: 'write_file', arguments: '{"path":"y",' } },
                ],
              },
            },
          ],
        },
      },
    ],
    [
      'streamed arguments that are a JSON string, not an object',
      streamed(['hm'], { toolCall: { name: 'run_command', args: 'ls' } }),
    ],
  ])('throws LlmResponseError on %s', async (_label, reply) => {
    const err = await failWith({}, reply);
    expect(err).toBeInstanceOf(LlmResponseError);
    expect(err).toMatchObject({ name: 'LlmResponseError', code: 'LLM_BAD_RESPONSE' });
    expect(server.requests).toHaveLength(1);
  });

  it.each<[string, Partial<LlmAgentOptions>, FakeReply[]]>([
    ['401', {}, [failure(401, {}, `Incorrect API key provided: ${KEY}`)]],
    ['429', {}, [failure(429, {}, `slow down, ${KEY}`)]],
    ['400', {}, [failure(400, {}, `bad request from ${KEY}`)]],
    ['500', {}, [failure(500, {}, `crashed handling ${KEY}`)]],
    ['a raw 502', {}, [{ status: 502, raw: `upstream said ${KEY}` }]],
    ['a dropped connection', {}, [{ drop: true }]],
    ['a malformed answer', {}, [{ raw: `{"choices": ${KEY}}` }]],
    ['a malformed answer with a long body', {}, [{ raw: `${'x'.repeat(500)} ${KEY}` }]],
    ['a 400 whose message is cut inside the key', {}, [failure(400, {}, `${'x'.repeat(290)}${KEY}`)]],
    ['an error event', {}, [streamed(['a'], { errorAfter: { after: 1, error: { message: `crashed on ${KEY}` } } })]],
    ['a rate-limit error event', {}, [streamed([], { errorAfter: { after: 0, error: { message: KEY, code: 429 } } })]],
    [
      'a stream event that is not JSON',
      {},
      [{ raw: `data: ${KEY}\n\n`, headers: { 'content-type': 'text/event-stream' } }],
    ],
  ])(
    'never puts the API key in the error of %s, even when the provider echoes it',
    async (_label, options, replies) => {
      const err = await failWith(options, ...replies);
      expect(err).toBeInstanceOf(Error);
      const everything = `${inspect(err, { depth: 10 })}\n${JSON.stringify(err)}`;
      expect(keyPieces.filter((piece) => everything.includes(piece))).toEqual([]);
      expect(server.requests[0]?.headers.authorization).toBe(`Bearer ${KEY}`);
    },
  );

  it('shows that the key was redacted where a provider echoed it', async () => {
    const err = await failWith({}, failure(400, {}, `bad request from ${KEY}`));
    expect((err as Error).message).toContain('bad request from [redacted]');
  });
});

describe('llmAgent cancellation', () => {
  it('stops reading the stream at once when aborted after a delta, with no delta after the abort', async () => {
    const controller = new AbortController();
    server.enqueue(streamed(['first', 'second'], { gapMs: 10_000 }));
    const deltas: string[] = [];
    const step = stepOver(agent(), history(created()), {
      signal: controller.signal,
      onDelta: (text) => {
        deltas.push(text);
        controller.abort();
      },
    });
    // The second delta is 10 s away: only a delta handed over as it came can abort before it.
    await expect(step).rejects.toMatchObject({ name: 'AbortError' });
    expect(deltas).toEqual(['first']);
    await until(() => server.requests[0]?.abandoned, 'the fake to see the connection closed');
    expect(server.requests).toHaveLength(1);
  });

  it('aborts a request in flight', async () => {
    const controller = new AbortController();
    server.enqueue({ hang: true });
    const step = stepOver(agent({ timeoutMs: 60_000 }), history(created()), { signal: controller.signal });
    await server.received(1);
    controller.abort();
    await expect(step).rejects.toMatchObject({ name: 'AbortError' });
    expect(server.requests).toHaveLength(1);
  });

  it('makes no request when the signal is already aborted', async () => {
    await expect(stepOver(agent(), history(created()), { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(server.requests).toHaveLength(0);
  });
});
