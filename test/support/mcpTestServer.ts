// An MCP stdio server for the MCP tests, written with the SDK's server side.
// Run it as `node --import <tsx's loader URL> test/support/mcpTestServer.ts`
// (see `mcpTestServerCommand` in mcpTestCommand.ts): its working directory is a
// workspace, where `--import tsx` would not resolve.
import { spawn } from 'node:child_process';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'tether-test', version: '1.0.0' });
const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });

server.registerTool('echo', { description: 'Returns its text.', inputSchema: { text: z.string() } }, ({ text: t }) =>
  text(t),
);

// No description on purpose: the client gives ''.
server.registerTool('env', { inputSchema: { name: z.string().optional() } }, ({ name }) =>
  text(name === undefined ? Object.keys(process.env).sort().join('\n') : (process.env[name] ?? '(unset)')),
);

// A loose schema: unknown arguments are kept, so a test sees exactly what the client sent.
server.registerTool(
  'args',
  {
    description: 'Returns the arguments it received, as JSON.',
    inputSchema: z.looseObject({ text: z.string().optional() }),
  },
  (args) => text(JSON.stringify(args)),
);

server.registerTool('cwd', { description: 'Its working directory.' }, () => text(process.cwd()));

server.registerTool('pid', { description: 'Its process id.' }, () => text(String(process.pid)));

server.registerTool('sleeper', { description: 'Starts `sleep 1000` in its group; gives its pid.' }, () => {
  const child = spawn('sleep', ['1000'], { stdio: 'ignore' });
  child.unref();
  return text(String(child.pid));
});

server.registerTool(
  'slow',
  { description: 'Answers after ms milliseconds.', inputSchema: { ms: z.number() } },
  ({ ms }, extra) =>
    new Promise((resolve) => {
      const timer = setTimeout(() => resolve(text('done')), ms);
      extra.signal.addEventListener('abort', () => clearTimeout(timer));
    }),
);

server.registerTool('exit_mid_call', { description: 'Exits (code 3) while the call is out.' }, () => {
  process.stderr.write('exit_mid_call: going away\n');
  setTimeout(() => process.exit(3), 20);
  return new Promise<never>(() => {});
});

server.registerTool('fail', { description: 'A tool error.' }, () => ({
  content: [{ type: 'text', text: 'it failed on purpose' }],
  isError: true,
}));

server.registerTool('picture', { description: 'Text and an image.' }, () => ({
  content: [
    { type: 'text', text: 'a picture:' },
    { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' },
  ],
}));

await server.connect(new StdioServerTransport());
