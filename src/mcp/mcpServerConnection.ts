import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../logger.ts';
import { LifelineStdioTransport } from './lifelineStdioTransport.ts';
import type { McpServerConfig } from './mcpConfig.ts';
import { failedCall, type McpCallResult, type McpToolInfo } from './mcpConnections.ts';
import { toolOutput } from './toolOutput.ts';

/** A server that keeps giving cursors: its list ends here. */
const MAX_TOOL_PAGES = 100;
/** How long a streamable HTTP server has to hear that its session ends. */
const TERMINATE_SESSION_MS = 1_000;
const CLIENT_INFO = { name: 'tether', version: '0.1.0' };

export interface McpServerConnectionOptions {
  name: string;
  config: McpServerConfig;
  conversationId: string;
  /** The conversation's workspace: a stdio server's working directory. */
  workspace: string;
  baseEnv: NodeJS.ProcessEnv;
  heartbeatMs?: number;
  startTimeoutMs: number;
  callTimeoutMs: number;
  logger: Logger;
  /** Called once when the connection ends, however it ends (a failed start, an exit, a close). */
  onEnd: () => void;
}

/**
 * One MCP server of one conversation, through the SDK's client: started,
 * listed, called, closed. It remembers why it stopped, so that a call to a
 * server that is gone is answered at once, in words, instead of waiting.
 */
export class McpServerConnection {
  private readonly client = new Client(CLIENT_INFO);
  private readonly transport: Transport;
  /** Why this side stopped it (a start that took too long, a close). */
  private stopReason: string | undefined;
  /** How it ended on its own ("exited (code 1): ..."). */
  private died: string | undefined;
  private closing: Promise<void> | undefined;
  private ended = false;

  constructor(private readonly options: McpServerConnectionOptions) {
    const { config, workspace, baseEnv, heartbeatMs } = options;
    this.transport =
      'url' in config
        ? new StreamableHTTPClientTransport(new URL(config.url))
        : new LifelineStdioTransport({ server: config, cwd: workspace, baseEnv, heartbeatMs });
    this.client.onclose = () => this.end();
    // Out-of-band trouble (a stray line on stdout, a lost SSE stream): calls report what matters.
    this.client.onerror = (error) => this.log('debug', 'MCP server trouble', { error: error.message });
  }

  /** Why calls cannot reach the server ("exited (code 1): ...", "was closed"), or undefined while it runs. */
  get gone(): string | undefined {
    return this.stopReason ?? this.died;
  }

  /** Connects and lists the tools within the start timeout; on failure it is closed and the error says why in words. */
  async start(signal?: AbortSignal): Promise<McpToolInfo[]> {
    const { startTimeoutMs } = this.options;
    const timer = setTimeout(() => this.stop(`did not start within ${startTimeoutMs} ms`), startTimeoutMs);
    const onAbort = () => this.stop('was stopped while it started');
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await this.client.connect(this.transport, { timeout: startTimeoutMs });
      const tools = await this.listTools();
      this.log('info', 'MCP server started', { tools: tools.length });
      return tools;
    } catch (error) {
      const reason = this.stopReason ?? this.diedHere() ?? describe(error);
      this.log('warn', 'MCP server did not start', { reason });
      await this.close();
      throw new Error(reason, { cause: error });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Calls a tool; see `McpConnections.call`. The values of the server's declared
   * `env` (its own keys, maybe) are masked in what comes back: it is stored and told to the model.
   */
  async call(tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpCallResult> {
    const result = await this.callUnmasked(tool, args, signal);
    const config = this.options.config;
    const values = 'env' in config ? Object.values(config.env).filter((v) => v.length >= 4) : [];
    const output = values.reduce((text, value) => text.split(value).join('<secret_hidden>'), result.output);
    return { ...result, output };
  }

  private async callUnmasked(
    tool: string,
    args: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<McpCallResult> {
    const { name, callTimeoutMs } = this.options;
    signal?.throwIfAborted();
    if (this.gone) return failedCall(`the MCP server ${name} ${this.gone}`);
    try {
      // The default result schema gives `content` (`[]` when absent): the old `toolResult` form never comes back.
      const result = (await this.client.callTool({ name: tool, arguments: args }, undefined, {
        timeout: callTimeoutMs,
        signal,
      })) as CallToolResult;
      return { output: toolOutput(result), isError: result.isError === true };
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      return failedCall(this.callFailure(tool, error));
    }
  }

  /** Stops the server (a stdio server's whole group) and resolves once it is gone. Idempotent. */
  close(): Promise<void> {
    this.stopReason ??= 'was closed';
    return (this.closing ??= this.shutDown());
  }

  private stop(reason: string): void {
    this.stopReason ??= reason;
    void this.close();
  }

  private async shutDown(): Promise<void> {
    if (this.transport instanceof StreamableHTTPClientTransport && this.died === undefined) {
      const terminated = this.transport.terminateSession().catch(() => {});
      await Promise.race([terminated, new Promise((resolve) => setTimeout(resolve, TERMINATE_SESSION_MS).unref())]);
    }
    await this.client.close().catch(() => {});
    this.end();
  }

  /** Every page of the server's tools; none when it offers no tools at all. */
  private async listTools(): Promise<McpToolInfo[]> {
    if (!this.client.getServerCapabilities()?.tools) return [];
    const tools: McpToolInfo[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_TOOL_PAGES; page++) {
      const params = cursor === undefined ? undefined : { cursor };
      const result = await this.client.listTools(params, { timeout: this.options.startTimeoutMs });
      for (const tool of result.tools) {
        tools.push({ name: tool.name, description: tool.description ?? '', input_schema: tool.inputSchema });
      }
      if (!result.nextCursor || result.nextCursor === cursor) break;
      cursor = result.nextCursor;
    }
    return tools;
  }

  private callFailure(tool: string, error: unknown): string {
    const { name, callTimeoutMs } = this.options;
    if (this.gone) return `during the call of ${tool}, the MCP server ${name} ${this.gone}`;
    if (error instanceof McpError && error.code === (ErrorCode.RequestTimeout as number)) {
      return `the MCP server ${name} did not answer the call of ${tool} within ${callTimeoutMs} ms`;
    }
    if (error instanceof McpError) return `the MCP server ${name} refused the call of ${tool}: ${error.message}`;
    return `the call of ${tool} on the MCP server ${name} failed: ${describe(error)}`;
  }

  /** The connection's end, once, whoever ended it: the hub frees its place. */
  private end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.stopReason === undefined) {
      this.died = this.diedHere() ?? 'closed its connection';
      this.log('warn', 'MCP server ended', { how: this.died });
    }
    this.options.onEnd();
  }

  /** How a stdio server ended on its own, or undefined. */
  private diedHere(): string | undefined {
    return this.transport instanceof LifelineStdioTransport ? this.transport.died : undefined;
  }

  private log(level: 'debug' | 'info' | 'warn', message: string, fields: Record<string, unknown>): void {
    const { logger, conversationId, name } = this.options;
    logger[level](message, { conversationId, server: name, ...fields });
  }
}

/** An error's message with its cause's (fetch says "fetch failed" and puts ECONNREFUSED in the cause). */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? ` (${error.cause.message})` : '';
  return `${error.message}${cause}`;
}
