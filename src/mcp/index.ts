export {
  McpServersSetting,
  MCP_TOOL_SEPARATOR,
  type McpServers,
  type McpServerConfig,
  type McpStdioServer,
  type McpHttpServer,
} from './mcpConfig.ts';
export type { McpConnections, McpServerTools, McpToolInfo, McpCallResult } from './mcpConnections.ts';
export { McpHub, type McpHubOptions } from './mcpHub.ts';
