import { mkdir, mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpHub, type McpConnections } from '../../src/mcp/index.ts';
import { processState } from '../../src/runtime/shellProcess.ts';
import { startMcpHttpTestServer, type McpHttpTestServer } from '../support/mcpHttpTestServer.ts';
import { buildMcpTestProgram, mcpTestServer } from '../support/mcpTestPrograms.ts';

const SECRET = 'TETHER_MCP_TEST_SECRET';
const MISSING = { command: 'no-such-mcp-server', args: [], env: {} };

let root: string;
let workspace: string;
let bundle: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-mcp-'));
  workspace = await realpath(await mkdir(join(root, 'ws'), { recursive: true }).then(() => join(root, 'ws')));
  bundle = await buildMcpTestProgram('server', root);
  process.env[SECRET] = 'must not reach an MCP server';
});

afterAll(async () => {
  delete process.env[SECRET];
  await rm(root, { recursive: true, force: true });
});

/** Whether a process is gone (a zombie is: it only waits to be reaped). */
function gone(pid: number): boolean {
  const state = processState(pid);
  return state === undefined || state === 'Z';
}

describe('McpHub with a stdio server and a command that does not exist', () => {
  let hub: McpHub;
  let mcp: McpConnections;

  beforeAll(async () => {
    const servers = { t: mcpTestServer(bundle, { DECLARED: 'yes' }), missing: MISSING };
    hub = new McpHub({ servers, maxLive: 10, callTimeoutMs: 400 });
    mcp = await hub.open('conv-1', workspace);
  });

  afterAll(() => mcp.close());

  it('lists every configured server in config order, with its tools', () => {
    expect(hub.configured).toBe(true);
    expect(mcp.servers.map((s) => s.name)).toEqual(['t', 'missing']);
    const tools = mcp.servers[0]!.tools;
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['echo', 'env', 'cwd', 'slow', 'exit_mid_call']));
    expect(tools.find((t) => t.name === 'echo')).toEqual({
      name: 'echo',
      description: 'Returns its text.',
      input_schema: expect.objectContaining({ type: 'object', properties: { text: { type: 'string' } } }),
    });
    expect(tools.find((t) => t.name === 'env')?.description).toBe('');
  });

  it('counts a command that does not exist as failed, with a message, and answers its calls with it', async () => {
    expect(mcp.servers[1]).toEqual({ name: 'missing', tools: [] });
    expect(mcp.problems).toEqual([
      expect.stringMatching(/^the MCP server missing did not start: exited \(code 127\): .*no-such-mcp-server/),
    ]);
    expect(hub.live).toBe(1);
    const result = await mcp.call('missing', 'anything', {});
    expect(result).toEqual({ output: mcp.problems[0], isError: true, failed: true });
  });

  it('calls a tool and gives its text output', async () => {
    await expect(mcp.call('t', 'echo', { text: 'hello' })).resolves.toEqual({ output: 'hello', isError: false });
  });

  it('notes non-text content briefly and passes a tool error on as an error result', async () => {
    await expect(mcp.call('t', 'picture', {})).resolves.toEqual({
      output: 'a picture:\n[image: image/png, 12 bytes base64]',
      isError: false,
    });
    await expect(mcp.call('t', 'fail', {})).resolves.toEqual({ output: 'it failed on purpose', isError: true });
  });

  it('gives the server exactly its declared env plus PATH and HOME, never a TETHER_ variable', async () => {
    expect((await mcp.call('t', 'env', {})).output.split('\n')).toEqual(['DECLARED', 'HOME', 'PATH']);
    expect((await mcp.call('t', 'env', { name: 'PATH' })).output).toBe(process.env.PATH);
    expect((await mcp.call('t', 'env', { name: 'DECLARED' })).output).toBe('yes');
  });

  it("runs the server in the conversation's workspace", async () => {
    await expect(mcp.call('t', 'cwd', {})).resolves.toEqual({ output: workspace, isError: false });
  });

  it('answers a call that outlasts the call timeout with an error result, and the server goes on', async () => {
    await expect(mcp.call('t', 'slow', { ms: 10_000 })).resolves.toEqual({
      output: 'the MCP server t did not answer the call of slow within 400 ms',
      isError: true,
      failed: true,
    });
    await expect(mcp.call('t', 'echo', { text: 'still here' })).resolves.toEqual({
      output: 'still here',
      isError: false,
    });
  });

  it('stops a call when its signal aborts, with the abort reason', async () => {
    const abort = new AbortController();
    const call = mcp.call('t', 'slow', { ms: 10_000 }, abort.signal);
    abort.abort(new Error('the user stopped'));
    await expect(call).rejects.toThrow('the user stopped');
  });

  it('answers a server that is not configured with an error result', async () => {
    await expect(mcp.call('nope', 'echo', {})).resolves.toEqual({
      output: 'there is no MCP server named nope',
      isError: true,
      failed: true,
    });
  });
});

describe('McpHub when a server exits or is closed', () => {
  it('answers a call during which the server exits with an error result, and later calls at once', async () => {
    const hub = new McpHub({
      servers: { doomed: mcpTestServer(bundle), kept: mcpTestServer(bundle) },
      maxLive: 5,
      callTimeoutMs: 5_000,
    });
    const mcp = await hub.open('conv-2', workspace);
    try {
      expect(mcp.problems).toEqual([]);
      expect(hub.live).toBe(2);
      await expect(mcp.call('doomed', 'exit_mid_call', {})).resolves.toEqual({
        output: 'during the call of exit_mid_call, the MCP server doomed exited (code 3): exit_mid_call: going away',
        isError: true,
        failed: true,
      });
      await expect(mcp.call('doomed', 'echo', { text: 'hi' })).resolves.toEqual({
        output: 'the MCP server doomed exited (code 3): exit_mid_call: going away',
        isError: true,
        failed: true,
      });
      expect(hub.live).toBe(1);
      await expect(mcp.call('kept', 'echo', { text: 'hi' })).resolves.toEqual({ output: 'hi', isError: false });
    } finally {
      await mcp.close();
    }
    expect(hub.live).toBe(0);
  });

  it("kills the server's whole process group on close", async () => {
    const hub = new McpHub({ servers: { t: mcpTestServer(bundle) }, maxLive: 5, callTimeoutMs: 5_000 });
    const mcp = await hub.open('conv-3', workspace);
    const pid = Number((await mcp.call('t', 'pid', {})).output);
    const sleeper = Number((await mcp.call('t', 'sleeper', {})).output);
    expect([gone(pid), gone(sleeper)]).toEqual([false, false]);
    await mcp.close();
    expect(gone(pid)).toBe(true);
    await expect.poll(() => gone(sleeper), { timeout: 2_000 }).toBe(true);
    expect(hub.live).toBe(0);
    await expect(mcp.call('t', 'echo', { text: 'hi' })).resolves.toEqual({
      output: 'the MCP server t was closed',
      isError: true,
      failed: true,
    });
    await mcp.close(); // idempotent
  });

  it('stops a server that does not answer within the start timeout and counts it as failed', async () => {
    const mute = { command: 'sleep', args: ['30'], env: {} };
    const hub = new McpHub({ servers: { mute }, maxLive: 5, callTimeoutMs: 5_000, startTimeoutMs: 300 });
    const mcp = await hub.open('conv-4', workspace);
    expect(mcp.problems).toEqual(['the MCP server mute did not start: did not start within 300 ms']);
    expect(hub.live).toBe(0);
    await mcp.close();
  });
});

describe('McpHub.open with a signal', () => {
  it('stops what it started and rejects with the reason when the signal aborts', async () => {
    const mute = { command: 'sleep', args: ['30'], env: {} };
    const hub = new McpHub({ servers: { mute }, maxLive: 5, callTimeoutMs: 5_000, startTimeoutMs: 10_000 });
    const abort = new AbortController();
    const opening = hub.open('conv-7', workspace, abort.signal);
    setTimeout(() => abort.abort(new Error('the conversation closed')), 100);
    await expect(opening).rejects.toThrow('the conversation closed');
    expect(hub.live).toBe(0);
  });
});

describe('McpHub with a streamable HTTP server', () => {
  let web: McpHttpTestServer;

  beforeAll(async () => {
    web = await startMcpHttpTestServer();
  });

  afterAll(() => web.close());

  it('lists every page of tools and calls one', async () => {
    const hub = new McpHub({ servers: { web: { url: web.url } }, maxLive: 5, callTimeoutMs: 5_000 });
    const mcp = await hub.open('conv-5', workspace);
    try {
      expect(mcp.problems).toEqual([]);
      expect(mcp.servers[0]!.tools.map((t) => t.name)).toEqual(['echo', 'shout', 'whisper']);
      await expect(mcp.call('web', 'shout', { text: 'hi' })).resolves.toEqual({ output: 'HI', isError: false });
    } finally {
      await mcp.close();
    }
  });

  it('refuses a server beyond TETHER_MCP_MAX_LIVE on the node, whichever conversation runs the others', async () => {
    const hub = new McpHub({ servers: { web: { url: web.url } }, maxLive: 1, callTimeoutMs: 5_000 });
    const first = await hub.open('conv-a', workspace);
    const second = await hub.open('conv-b', workspace);
    const problem = 'the MCP server web did not start: TETHER_MCP_MAX_LIVE (1) servers already run on this node';
    expect(second.servers).toEqual([{ name: 'web', tools: [] }]);
    expect(second.problems).toEqual([problem]);
    await expect(second.call('web', 'echo', { text: 'hi' })).resolves.toEqual({
      output: problem,
      isError: true,
      failed: true,
    });
    expect(hub.live).toBe(1);
    await first.close();
    await second.close();
    expect(hub.live).toBe(0);
    const third = await hub.open('conv-c', workspace);
    expect(third.problems).toEqual([]);
    await third.close();
  });

  it('counts a server it cannot reach as failed, with the reason', async () => {
    const hub = new McpHub({ servers: { gone: { url: 'http://127.0.0.1:9/mcp' } }, maxLive: 5, callTimeoutMs: 5_000 });
    const mcp = await hub.open('conv-6', workspace);
    expect(mcp.problems).toEqual([expect.stringMatching(/^the MCP server gone did not start: fetch failed \(.+\)$/)]);
    expect(hub.live).toBe(0);
    await mcp.close();
  });
});
