// A child process for the MCP lifeline tests, which kill or freeze their server
// (bundled by `buildMcpTestProgram('hubChild', dir)`): opens the test MCP
// server <serverBundle> for one conversation in <workspace> (with a heartbeat
// unless <heartbeatMs> is 0), starts a `sleep` in the server's group, prints
// "<server pid> <sleep pid>" as one line, then idles until it is killed.
import { McpHub } from '../../src/mcp/index.ts';

const [workspace, serverBundle, heartbeatMs] = process.argv.slice(2);
if (!workspace || !serverBundle || !heartbeatMs) {
  throw new Error('usage: mcpHubChild <workspace> <serverBundle> <heartbeatMs>');
}
const hub = new McpHub({
  servers: { t: { command: process.execPath, args: [serverBundle], env: {} } },
  maxLive: 1,
  callTimeoutMs: 5_000,
  heartbeatMs: Number(heartbeatMs) || undefined,
});
const mcp = await hub.open('conv-1', workspace);
if (mcp.problems.length > 0) throw new Error(mcp.problems.join('\n'));
const pid = await mcp.call('t', 'pid', {});
const sleeper = await mcp.call('t', 'sleeper', {});
process.stdout.write(`${pid.output} ${sleeper.output}\n`);
setInterval(() => {}, 60_000);
