import { beforeAll, describe, expect, it } from 'vitest';
import type { EventOf, LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { processState } from '../../src/runtime/shellProcess.ts';
import { useE2e } from '../support/e2e.ts';
import { startFakeLlmServer, text, type FakeLlmServer, type FakeReply } from '../support/fakeLlmServer.ts';
import { buildMcpTestProgram, mcpTestServer } from '../support/mcpTestPrograms.ts';
import { stateOf } from '../support/logQueries.ts';
import { createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';

// The agent's tool calls end to end: a real server (dist/) with the fake LLM and the MCP test
// server (TETHER_MCP_SERVERS). One server process serves every test; the last one restarts it.

const e2e = useE2e();
let llm: FakeLlmServer;
let server: ServerProcess;
let dataDir: string;
let bundle: string;
let baseEnv: Record<string, string>;

/** A TETHER_ variable of the server's own that no MCP server may see. */
const MARK = 'TETHER_E2E_TOOL_CALLS_MARK';

const mcpServers = (names: string[]) =>
  JSON.stringify(Object.fromEntries(names.map((name) => [name, mcpTestServer(bundle, { MCP_DECLARED: 'yes' })])));

beforeAll(async () => {
  llm = await startFakeLlmServer();
  e2e.onCleanup(() => llm.close());
  const dir = await e2e.tempDir();
  dataDir = await e2e.tempDir();
  bundle = await buildMcpTestProgram('server', dir);
  baseEnv = {
    TETHER_LLM_BASE_URL: llm.baseUrl,
    TETHER_LLM_API_KEY: 'sk-tool-calls-e2e',
    TETHER_LLM_MODEL: 'fake-model',
    TETHER_MCP_CALL_TIMEOUT_MS: '10000',
    [MARK]: 'must-not-reach-mcp',
  };
  server = await e2e.start({ dataDir, env: { ...baseEnv, TETHER_MCP_SERVERS: mcpServers(['t']) } });
}, 60_000);

interface Call {
  id: string;
  name: string;
  args: Record<string, unknown>;
}

/** A tool call as the model writes it (and as it must come back in the history). */
const asMade = ({ id, name, args }: Call) => ({
  id,
  type: 'function',
  function: { name, arguments: JSON.stringify(args) },
});

/** A completion whose assistant message makes these calls, in this order. */
function reply(...calls: Call[]): FakeReply {
  return {
    json: {
      id: 'chatcmpl-fake',
      object: 'chat.completion',
      model: 'fake-model',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: null, tool_calls: calls.map(asMade) },
          finish_reason: 'tool_calls',
        },
      ],
    },
  };
}

interface ChatMessage {
  role: string;
  content: string | null;
  tool_calls?: unknown[];
  tool_call_id?: string;
}
interface ChatTool {
  function: { name: string; parameters: { properties: Record<string, unknown>; required: string[] } };
}

/** The request the fake LLM received as `n`-th (0-based). */
const request = (n: number) => llm.requests[n]!.body as { messages: ChatMessage[]; tools: ChatTool[] };

const stored = (events: LoggedEvent[]): StoredEvent[] => events.map((e) => e.event);

/** The events once the agent has said `content` and waits for the user. */
function untilSaid(id: string, content: string, on: ServerProcess = server): Promise<LoggedEvent[]> {
  return eventsWhen(
    on,
    id,
    `the agent to say ${JSON.stringify(content)} and wait`,
    (events) =>
      stateOf(events) === 'awaiting_user_input' &&
      events.some((e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.data.content === content),
    30_000,
  );
}

function untilState(id: string, state: string, count = 1): Promise<LoggedEvent[]> {
  return eventsWhen(
    server,
    id,
    `the agent to be ${state} (${count})`,
    (events) => stateOf(events) === state && states(stored(events)).filter((s) => s === state).length >= count,
    30_000,
  );
}

const states = (events: StoredEvent[]) =>
  events.flatMap((e) => (e.type === 'agent_state_changed' ? [e.data.state] : []));

/** The result stored for the agent call stored as event `id` (its cause). */
const resultOf = (events: StoredEvent[], id: number) =>
  events.find(
    (e): e is EventOf<'tool_result' | 'command_output'> =>
      (e.type === 'tool_result' || e.type === 'command_output') && e.cause === id,
  );

async function act(id: string, action: Record<string, unknown>, on: ServerProcess = server): Promise<void> {
  const res = await http(on.baseUrl, 'POST', `/api/conversations/${id}/actions`, { action });
  expect(res.status, res.text).toBe(202);
}

/** The agent's calls as stored, each with its result. */
function callsAndResults(events: StoredEvent[]) {
  return events.flatMap((e) => {
    if (e.source !== 'agent' || (e.type !== 'tool_call' && e.type !== 'command')) return [];
    const result = resultOf(events, e.id);
    return [{ call: e, result }];
  });
}

describe('tool calls as the model made them', () => {
  it('sends the model its calls as made (one reply with two calls among them), each followed by its result, and stores them as tool_call/tool_result and command/command_output with the same call ids', async () => {
    const from = llm.requests.length;
    const write: Call = {
      id: 'call_write_1',
      name: 'write_file',
      args: { path: 'notes.txt', content: 'first line\nsecond line\n', security_risk: 'LOW' },
    };
    const read: Call = { id: 'call_read_1', name: 'read_file', args: { path: 'notes.txt' } };
    const shell: Call = {
      id: 'call_shell_2a',
      name: 'run_command',
      args: { command: 'echo from-shell; wc -l < notes.txt', security_risk: 'LOW' },
    };
    const readAgain: Call = { id: 'call_read_2b', name: 'read_file', args: { path: 'notes.txt' } };
    const echo: Call = { id: 'call_echo_3', name: 't__echo', args: { text: 'echoed by mcp', security_risk: 'LOW' } };
    llm.enqueue(reply(write), reply(read), reply(shell, readAgain), reply(echo), text('All four done.'));
    const id = await createConversation(server.baseUrl, { initial_message: 'Take notes.' });
    const events = stored(await untilSaid(id, 'All four done.'));
    expect(llm.requests.length - from).toBe(5);

    const file = 'first line\nsecond line\n';
    const answered = (call: Call, content: string) => [{ role: 'tool', tool_call_id: call.id, content }];
    expect(request(from + 4).messages.slice(1)).toEqual([
      { role: 'user', content: 'Take notes.' },
      { role: 'assistant', content: null, tool_calls: [asMade(write)] },
      ...answered(write, `Wrote ${file.length} bytes to notes.txt.`),
      { role: 'assistant', content: null, tool_calls: [asMade(read)] },
      ...answered(read, file),
      { role: 'assistant', content: null, tool_calls: [asMade(shell), asMade(readAgain)] },
      ...answered(shell, 'Exit code: 0\nOutput:\nfrom-shell\n2\n'),
      ...answered(readAgain, file),
      { role: 'assistant', content: null, tool_calls: [asMade(echo)] },
      ...answered(echo, 'echoed by mcp'),
    ]);
    // Each step was sent the history so far: the third had the first two calls and their results.
    expect(request(from + 2).messages.slice(1)).toEqual(request(from + 4).messages.slice(1, 6));

    const pairs = callsAndResults(events).map(({ call, result }) => ({
      type: call.type,
      call_id: call.data.call_id,
      what: call.type === 'tool_call' ? call.data.tool : call.data.command,
      result: result?.type,
      result_call_id: result?.data.call_id,
      output: result?.data.output,
    }));
    expect(pairs).toEqual([
      {
        type: 'tool_call',
        call_id: write.id,
        what: 'write_file',
        result: 'tool_result',
        result_call_id: write.id,
        output: `Wrote ${file.length} bytes to notes.txt.`,
      },
      {
        type: 'tool_call',
        call_id: read.id,
        what: 'read_file',
        result: 'tool_result',
        result_call_id: read.id,
        output: file,
      },
      {
        type: 'command',
        call_id: shell.id,
        what: shell.args.command,
        result: 'command_output',
        result_call_id: shell.id,
        output: 'from-shell\n2\n',
      },
      {
        type: 'tool_call',
        call_id: readAgain.id,
        what: 'read_file',
        result: 'tool_result',
        result_call_id: readAgain.id,
        output: file,
      },
      {
        type: 'tool_call',
        call_id: echo.id,
        what: 't__echo',
        result: 'tool_result',
        result_call_id: echo.id,
        output: 'echoed by mcp',
      },
    ]);
    // Arguments as the model gave them, security_risk included; the reply's two calls were stored together.
    const toolCalls = events.filter((e): e is EventOf<'tool_call'> => e.type === 'tool_call');
    expect(toolCalls.map((e) => e.data.arguments)).toEqual([write.args, read.args, readAgain.args, echo.args]);
    const command = events.find((e): e is EventOf<'command'> => e.type === 'command' && e.source === 'agent')!;
    const second = toolCalls.find((e) => e.data.call_id === readAgain.id)!;
    expect(second.id).toBe(command.id + 1);
    expect(second.data.item_id).toBe(command.data.item_id);
    expect(command.data).toMatchObject({ risk: 'low', security_risk: 'LOW', needs_confirmation: false });
  });

  it("offers the MCP server's tools as <server>__<tool>, stores them in tools_listed, and never passes security_risk on to the server", async () => {
    const from = llm.requests.length;
    const args: Call = { id: 'call_args', name: 't__args', args: { text: 'hi', security_risk: 'MEDIUM' } };
    llm.enqueue(reply(args), text('The server got its text.'));
    const id = await createConversation(server.baseUrl, { initial_message: 'Show me the arguments.' });
    const events = stored(await untilSaid(id, 'The server got its text.'));

    const listed = events.filter((e): e is EventOf<'tools_listed'> => e.type === 'tools_listed');
    expect(listed).toHaveLength(1);
    expect(listed[0]!.data.servers.map((s) => s.name)).toEqual(['t']);
    const tools = listed[0]!.data.servers[0]!.tools;
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['echo', 'args', 'env', 'pid', 'exit_mid_call']));
    expect(tools.find((t) => t.name === 'echo')).toMatchObject({
      description: 'Returns its text.',
      input_schema: { type: 'object', properties: { text: { type: 'string' } } },
    });
    // Listed before the agent's first step.
    const firstStep = events.find((e) => e.type === 'agent_state_changed' && e.data.state === 'running')!;
    expect(listed[0]!.id).toBeLessThan(firstStep.id);

    // Offered to the model: every listed tool, named <server>__<tool>, each asking for security_risk.
    const offered = request(from).tools.map((t) => t.function.name);
    expect(offered).toEqual(expect.arrayContaining(['run_command', 'read_file', 'write_file']));
    expect(offered.filter((name) => name.startsWith('t__')).sort()).toEqual(tools.map((t) => `t__${t.name}`).sort());
    const echo = request(from).tools.find((t) => t.function.name === 't__echo')!;
    expect(echo.function.parameters.properties).toHaveProperty('text');
    expect(echo.function.parameters.properties).toHaveProperty('security_risk');
    expect(echo.function.parameters.required).toEqual(['text', 'security_risk']);

    // The model's call is stored with its rating; the server received only the tool's own arguments.
    const call = events.find((e): e is EventOf<'tool_call'> => e.type === 'tool_call')!;
    expect(call.data).toMatchObject({
      call_id: 'call_args',
      tool: 't__args',
      arguments: args.args,
      security_risk: 'MEDIUM',
    });
    expect(resultOf(events, call.id)?.data).toEqual({
      call_id: 'call_args',
      tool: 't__args',
      output: '{"text":"hi"}',
      is_error: false,
    });
    // And the model read that result.
    expect(request(from + 1).messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_args',
      content: '{"text":"hi"}',
    });
  });

  it('answers a call to an MCP server that exits mid-call with an error result, and the conversation goes on', async () => {
    const from = llm.requests.length;
    const exit: Call = { id: 'call_exit', name: 't__exit_mid_call', args: { security_risk: 'LOW' } };
    llm.enqueue(reply(exit), text('The tool server went away; I carry on.'));
    const id = await createConversation(server.baseUrl, { initial_message: 'Call the fragile tool.' });
    const events = stored(await untilSaid(id, 'The tool server went away; I carry on.'));
    expect(llm.requests.length - from).toBe(2);

    const call = events.find((e): e is EventOf<'tool_call'> => e.type === 'tool_call')!;
    const result = resultOf(events, call.id);
    expect(result?.type).toBe('tool_result');
    expect(result?.data).toMatchObject({ call_id: 'call_exit', tool: 't__exit_mid_call', is_error: true });
    expect(result?.data.output).toMatch(/the MCP server t exited \(code 3\)/);
    // The next step was asked, with the error as the call's result, and its answer was stored.
    expect(request(from + 1).messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_exit',
      content: `Error: ${result!.data.output}`,
    });
    expect(states(events)).not.toContain('error');
  });

  it("starts the MCP server without the server's TETHER_ variables", async () => {
    const env: Call = { id: 'call_env', name: 't__env', args: { security_risk: 'LOW' } };
    llm.enqueue(reply(env), text('Listed.'));
    const id = await createConversation(server.baseUrl, { initial_message: 'What environment does the tool see?' });
    const events = stored(await untilSaid(id, 'Listed.'));
    const call = events.find((e): e is EventOf<'tool_call'> => e.type === 'tool_call')!;
    const result = resultOf(events, call.id) as EventOf<'tool_result'>;
    expect(result.data.is_error).toBe(false);
    const names = result.data.output.split('\n');
    // The list is real: what the configuration declares, and PATH, are there.
    expect(names).toEqual(expect.arrayContaining(['MCP_DECLARED', 'PATH']));
    expect(names.filter((name) => name.startsWith('TETHER_'))).toEqual([]);
    expect(result.data.output).not.toContain(MARK);
  });

  it('in confirmation mode, waits on a call either rating puts at HIGH and runs a LOW harmless one at once', async () => {
    const from = llm.requests.length;
    const high: Call = { id: 'call_high', name: 'run_command', args: { command: 'echo hi', security_risk: 'HIGH' } };
    const floor: Call = {
      id: 'call_floor',
      name: 'run_command',
      args: { command: 'rm -rf build', security_risk: 'LOW' },
    };
    const low: Call = { id: 'call_low', name: 'run_command', args: { command: 'echo low', security_risk: 'LOW' } };
    llm.enqueue(reply(high), reply(floor), reply(low), text('Three commands ran.'));
    const id = await createConversation(server.baseUrl, { initial_message: 'Run three.', confirmation_mode: true });

    // The model's HIGH on a harmless command waits.
    let events = stored(await untilState(id, 'awaiting_user_confirmation'));
    const commands = () => events.filter((e): e is EventOf<'command'> => e.type === 'command' && e.source === 'agent');
    expect(commands().map((c) => c.data)).toEqual([
      expect.objectContaining({
        command: 'echo hi',
        call_id: 'call_high',
        risk: 'low',
        security_risk: 'HIGH',
        needs_confirmation: true,
      }),
    ]);
    expect(resultOf(events, commands()[0]!.id)).toBeUndefined();
    await act(id, { type: 'change_agent_state', state: 'user_confirmed' });

    // The rules' floor holds `rm -rf` whatever the model says.
    events = stored(await untilState(id, 'awaiting_user_confirmation', 2));
    expect(commands().map((c) => c.data)).toEqual([
      expect.objectContaining({ call_id: 'call_high' }),
      expect.objectContaining({
        command: 'rm -rf build',
        call_id: 'call_floor',
        risk: 'high',
        security_risk: 'LOW',
        needs_confirmation: true,
      }),
    ]);
    expect(resultOf(events, commands()[0]!.id)?.data).toMatchObject({ exit_code: 0, output: 'hi\n' });
    expect(resultOf(events, commands()[1]!.id)).toBeUndefined();
    await act(id, { type: 'change_agent_state', state: 'user_confirmed' });

    // A LOW harmless command runs without asking.
    events = stored(await untilSaid(id, 'Three commands ran.'));
    expect(llm.requests.length - from).toBe(4);
    const last = commands()[2]!;
    expect(last.data).toMatchObject({
      command: 'echo low',
      call_id: 'call_low',
      risk: 'low',
      security_risk: 'LOW',
      needs_confirmation: false,
    });
    expect(resultOf(events, last.id)?.data).toMatchObject({ exit_code: 0, output: 'low\n' });
    expect(states(events).filter((s) => s === 'awaiting_user_confirmation')).toHaveLength(2);
    expect(states(events.filter((e) => e.id > last.id))).not.toContain('awaiting_user_confirmation');
  });

  // Last: it stops the shared server.
  it('lists the tools again when another server process takes the conversation over, and starts the MCP server anew', async () => {
    const from = llm.requests.length;
    const pid: Call = { id: 'call_pid_1', name: 't__pid', args: { security_risk: 'LOW' } };
    llm.enqueue(reply(pid), text('Got the pid.'));
    const id = await createConversation(server.baseUrl, { initial_message: 'Which pid does the tool server have?' });
    const before = stored(await untilSaid(id, 'Got the pid.'));
    const pidOf = (events: StoredEvent[], callId: string) => {
      const call = events.find((e) => e.type === 'tool_call' && e.data.call_id === callId)!;
      return Number((resultOf(events, call.id) as EventOf<'tool_result'>).data.output);
    };
    const firstPid = pidOf(before, 'call_pid_1');
    expect(firstPid).toBeGreaterThan(0);

    await server.stop();
    // The MCP server went with it.
    expect(['Z', undefined]).toContain(processState(firstPid));

    // The next owner configures one more server.
    const next = await e2e.start({ dataDir, env: { ...baseEnv, TETHER_MCP_SERVERS: mcpServers(['t', 'u']) } });
    const again: Call = { id: 'call_pid_2', name: 't__pid', args: { security_risk: 'LOW' } };
    llm.enqueue(reply(again), text('Got it again.'));
    await act(id, { type: 'message', content: 'And now?' }, next);
    const after = stored(await untilSaid(id, 'Got it again.', next));

    const listed = after.filter((e): e is EventOf<'tools_listed'> => e.type === 'tools_listed');
    expect(listed).toHaveLength(2);
    expect(listed.map((e) => e.data.servers.map((s) => s.name))).toEqual([['t'], ['t', 'u']]);
    expect(listed[1]!.data.servers[1]!.tools).toEqual(listed[1]!.data.servers[0]!.tools);
    const asked = after.find((e) => e.type === 'message' && e.source === 'user' && e.data.content === 'And now?')!;
    expect(listed[1]!.id).toBeGreaterThan(asked.id);
    // Listed before the new owner's first step: that step is already offered the new server's tools.
    const call = after.find((e) => e.type === 'tool_call' && e.data.call_id === 'call_pid_2')!;
    expect(listed[1]!.id).toBeLessThan(call.id);
    expect(llm.requests.length - from).toBe(4);
    const offered = (n: number) => request(n).tools.map((t) => t.function.name);
    expect(offered(from)).not.toContain('u__echo');
    expect(request(from + 2).messages.at(-1)).toMatchObject({ role: 'user', content: 'And now?' });
    expect(offered(from + 2)).toEqual(expect.arrayContaining(['t__echo', 'u__echo', 'u__pid']));
    // A new MCP server process answered.
    const secondPid = pidOf(after, 'call_pid_2');
    expect(secondPid).toBeGreaterThan(0);
    expect(secondPid).not.toBe(firstPid);
  }, 60_000);
});
