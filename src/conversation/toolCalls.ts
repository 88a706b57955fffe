import { isDeepStrictEqual } from 'node:util';
import type { Effect } from '../../machines/index.ts';
import type { StatusFrame } from '../../protocol/index.ts';
import type { McpConnections } from '../mcp/index.ts';
import { readWorkspaceFile, writeWorkspaceFile, type FileToolResult } from '../workspace/fileTools.ts';
import type { EffectDeps, EffectHost } from './effectRunner.ts';

/** The longest tool result stored; the rest is left out, with a note. */
export const MAX_TOOL_OUTPUT_CHARS = 100_000;

/** An MCP tool's name as the model calls it: `<server>__<tool>` (the server's name holds no `__`). */
const MCP_TOOL = /^([A-Za-z0-9_-]+?)__(.+)$/;

/** Where a tool call runs: the conversation's workspace, and its MCP servers (none when none are configured). */
export interface ToolPlace {
  workspace: string;
  mcp: McpConnections | null;
}

/**
 * Makes one tool call (`call_tool`): the file tools on the workspace (a path
 * that resolves outside it is refused), an MCP tool on its server (its
 * `security_risk` argument stripped first). Never throws for the model's
 * mistakes or a server's failure: the result says what happened. Rejects
 * only when `signal` aborts an MCP call.
 */
export async function callTool(
  effect: Extract<Effect, { type: 'call_tool' }>,
  place: ToolPlace,
  signal: AbortSignal,
): Promise<FileToolResult & { failed?: true }> {
  const { tool, arguments: args } = effect;
  const text = (key: string) => (typeof args[key] === 'string' ? args[key] : undefined);
  switch (tool) {
    case 'read_file': {
      const path = text('path');
      return path === undefined ? needs(tool, 'path') : readWorkspaceFile(place.workspace, path);
    }
    case 'write_file': {
      const path = text('path');
      const content = text('content');
      if (path === undefined) return needs(tool, 'path');
      return content === undefined ? needs(tool, 'content') : writeWorkspaceFile(place.workspace, path, content);
    }
    case 'run_command':
      return needs(tool, 'command');
    case 'ask_user':
      if (!text('question')?.trim()) return needs(tool, 'question');
      return error(`${tool} was not done: call it alone, in a reply of its own (this reply's other calls were made).`);
    case 'finish':
      return error(`${tool} was not done: call it alone, in a reply of its own (this reply's other calls were made).`);
  }
  const mcp = MCP_TOOL.exec(tool);
  if (!mcp) return error(`there is no tool named ${JSON.stringify(tool)}.`);
  const [, server, name] = mcp as unknown as [string, string, string];
  if (!place.mcp?.servers.some((s) => s.name === server)) {
    return error(`no MCP server named ${JSON.stringify(server)} runs for this conversation.`);
  }
  const { security_risk: _rating, ...rest } = args;
  const result = await place.mcp.call(server, name, rest, signal);
  return { output: clip(result.output), isError: result.isError, ...(result.failed && { failed: true as const }) };
}

function needs(tool: string, key: string): FileToolResult {
  return error(`${tool} needs a string argument "${key}".`);
}

function error(output: string): FileToolResult {
  return { output, isError: true };
}

function clip(output: string): string {
  if (output.length <= MAX_TOOL_OUTPUT_CHARS) return output;
  return `${output.slice(0, MAX_TOOL_OUTPUT_CHARS)}\n[cut: the tool answered ${output.length} characters]`;
}

/**
 * Starts the conversation's MCP servers with its runtime and lists their
 * tools: stored (`tools_listed`) before the agent's first step when they
 * differ from what the log listed last (a new owner, a restart or a fork
 * lists them again). A server that failed is a status line, not a failed
 * start. Null when this node runs no MCP servers.
 */
export async function openMcp(
  host: EffectHost,
  deps: Pick<EffectDeps, 'mcp'>,
  workspace: string,
  signal: AbortSignal,
  status: (frame: Omit<StatusFrame, 'type'>) => void,
): Promise<McpConnections | null> {
  const hub = deps.mcp;
  // A node without MCP servers lists nothing (a log that listed tools keeps offering them; their calls fail).
  if (!hub?.configured) return null;
  const connections = await hub.open(host.conversationId, workspace, signal);
  try {
    for (const problem of connections.problems) status({ level: 'warning', id: 'STATUS$MCP_SERVER', message: problem });
    const listed = await host.toolsListed();
    if (!isDeepStrictEqual(listed, connections.servers)) {
      await host.decide({ type: 'tools_listed', servers: connections.servers });
    }
    return connections;
  } catch (err) {
    // Not handed over: the servers (and their places on the node) are given back here.
    await connections.close();
    throw err;
  }
}
