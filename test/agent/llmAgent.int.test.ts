import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { inspect, promisify } from 'node:util';
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
const output = (cause: number, command: string, out: string, exit_code: number | null = 0): Draft => ({
  source: 'environment',
  type: 'command_output',
  cause,
  data: { command, exit_code, output: out, timed_out: false, truncated: false },
});
const stateChanged: Draft = { source: 'environment', type: 'agent_state_changed', data: { state: 'running' } };

let server: FakeLlmServer;
let workspace: string;

beforeEach(async () => {
  server = await startFakeLlmServer();
  workspace = await mkdtemp(join(tmpdir(), 'tether-llm-agent-'));
});

afterEach(async () => {
  await server.close();
  await rm(workspace, { recursive: true, force: true });
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

/** Runs a generated command the way a runtime would: bash, in the workspace. */
async function bash(command: string): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', ['--noprofile', '--norc', '-c', command], { cwd: workspace });
  return stdout;
}

async function commandOf(reply: FakeReply): Promise<string> {
  const action = await stepWith(reply);
  if (action.type !== 'run') throw new Error(`expected a run action, got ${JSON.stringify(action)}`);
  return action.command;
}

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
  it('turns a run_command call into a run action with the command as given', async () => {
    expect(await stepWith(toolCall('run_command', { command: 'ls -la | wc -l' }))).toEqual({
      type: 'run',
      command: 'ls -la | wc -l',
    });
  });

  it('turns a read_file call into a command that prints the file, whatever its name', async () => {
    const name = `-odd 'name' "$HOME" \`x\`.txt`;
    await writeFile(join(workspace, name), 'the content\n');
    const command = await commandOf(toolCall('read_file', { path: name }));
    expect(await bash(command)).toBe('the content\n');
  });

  const nasty: [string, string][] = [
    ['quotes', `it's a "quoted" 'string' with '\\'' inside`],
    ['expansions', '$HOME ${PATH} $(echo pwned) `echo pwned` $((1+1)) !! ~'],
    ['delimiter-like lines', "line\nEOF\nTETHER_EOF\n'EOF'\nEOF"],
    ['no trailing newline', 'last line without newline'],
    ['trailing and leading newlines', '\n\nbody\n\n\n'],
    ['printf escapes', 'back\\slash \\n %s %d %% \\x41 \\0'],
    ['option-like content', '-n'],
    ['empty content', ''],
    ['unicode, tabs and CRLF', 'héllo ✓ 日本語 🎉\ttab\r\ncrlf\r\n'],
  ];

  it.each(nasty)('writes content with %s byte for byte through write_file', async (_label, content) => {
    const path = `new dir/it's "odd" $x/file.txt`;
    const command = await commandOf(toolCall('write_file', { path, content }));
    await bash(command);
    expect(await readFile(join(workspace, path), 'utf8')).toBe(content);
  });

  it('replaces an existing file through write_file instead of appending to it', async () => {
    await mkdir(dirname(join(workspace, 'a/b.txt')), { recursive: true });
    await writeFile(join(workspace, 'a/b.txt'), 'old content that is longer');
    await bash(await commandOf(toolCall('write_file', { path: 'a/b.txt', content: 'new' })));
    expect(await readFile(join(workspace, 'a/b.txt'), 'utf8')).toBe('new');
  });

  it('turns ask_user into a message that waits for the user', async () => {
    expect(await stepWith(toolCall('ask_user', { question: 'Which branch?' }))).toEqual({
      type: 'message',
      content: 'Which branch?',
    });
  });

  it('turns finish into a finish action with its message', async () => {
    expect(await stepWith(toolCall('finish', { message: 'All tests pass.' }))).toEqual({
      type: 'finish',
      content: 'All tests pass.',
    });
  });

  it('turns a plain text reply into a message', async () => {
    expect(await stepWith(text('  Hello there.  '))).toEqual({ type: 'message', content: 'Hello there.' });
  });

  it('acts on the first tool call when the model makes several', async () => {
    const reply: FakeReply = {
      json: {
        choices: [
          {
            message: {
              role: 'assistant',
              content: null,
              tool_calls: [
                { id: 'a', type: 'function', function: { name: 'run_command', arguments: '{"command":"first"}' } },
                { id: 'b', type: 'function', function: { name: 'run_command', arguments: '{"command":"second"}' } },
              ],
            },
          },
        ],
      },
    };
    expect(await stepWith(reply)).toEqual({ type: 'run', command: 'first' });
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

  it('sends each agent command as a tool call followed by its own output, and user commands as notes', async () => {
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
    expect(action).toEqual({ type: 'run', command: 'ls -la', thought: 'Let me look.\n' });
    expect(deltas.join('')).toBe(action.thought);
  });

  it('gives a tool call streamed without text no thought and reports no delta', async () => {
    const { action, deltas } = await streamStep(
      streamed([], { toolCall: { name: 'finish', args: { message: 'All done.' } } }),
    );
    expect(action).toEqual({ type: 'finish', content: 'All done.' });
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
    expect(action).toEqual({
      type: 'run',
      command: 'first',
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
    ['a call of an unknown tool', toolCall('delete_everything', {})],
    ['a streamed call of an unknown tool', streamed(['hm'], { toolCall: { name: 'delete_everything', args: {} } })],
    [
      'arguments that are not JSON',
      {
        json: {
          choices: [{ message: { tool_calls: [{ function: { name: 'run_command', arguments: '{"command":' } }] } }],
        },
      },
    ],
    ['write_file without a path', toolCall('write_file', { content: 'x' })],
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
