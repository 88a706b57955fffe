import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

/** Its tools, two to a page, so that a client must follow the cursor to see them all. */
const TOOLS = ['echo', 'shout', 'whisper'].map((name) => ({
  name,
  description: `${name}s its text`,
  inputSchema: { type: 'object' as const, properties: { text: { type: 'string' } } },
}));
const PAGE = 2;

function mcpServer(): Server {
  const server = new Server({ name: 'tether-http-test', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, (request) => {
    const start = Number(request.params?.cursor ?? 0);
    const next = start + PAGE < TOOLS.length ? String(start + PAGE) : undefined;
    return { tools: TOOLS.slice(start, start + PAGE), ...(next ? { nextCursor: next } : {}) };
  });
  server.setRequestHandler(CallToolRequestSchema, (request) => {
    const text = typeof request.params.arguments?.text === 'string' ? request.params.arguments.text : '';
    const out = { echo: text, shout: text.toUpperCase(), whisper: text.toLowerCase() }[request.params.name];
    if (out === undefined) return { content: [{ type: 'text', text: 'no such tool' }], isError: true };
    return { content: [{ type: 'text', text: out }] };
  });
  return server;
}

export interface McpHttpTestServer {
  url: string;
  close(): Promise<void>;
}

/** A stateless streamable HTTP MCP server on a free local port, built with the SDK's low-level server. */
export async function startMcpHttpTestServer(): Promise<McpHttpTestServer> {
  const http: HttpServer = createServer((req, res) => {
    if (req.method !== 'POST') return void res.writeHead(405).end();
    const server = mcpServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => void server.close());
    server
      .connect(transport)
      .then(() => transport.handleRequest(req, res))
      .catch(() => res.headersSent || res.writeHead(500).end());
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: () => new Promise((resolve) => http.close(() => resolve())),
  };
}
