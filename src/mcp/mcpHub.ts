import { silentLogger, type Logger } from '../logger.ts';
import type { McpServers } from './mcpConfig.ts';
import { failedCall, type McpCallResult, type McpConnections, type McpServerTools } from './mcpConnections.ts';
import { McpServerConnection } from './mcpServerConnection.ts';

const DEFAULT_START_TIMEOUT_MS = 30_000;

export interface McpHubOptions {
  servers: McpServers;
  /** How many server connections may run on this node at once, every conversation's together. */
  maxLive: number;
  /** How long one tool call may take. */
  callTimeoutMs: number;
  /** How long a server may take to start and list its tools (default 30 s). */
  startTimeoutMs?: number;
  /** See `lifeline()`: a stdio server dies when this node sends no heartbeat for this long (frozen). */
  heartbeatMs?: number;
  logger?: Logger;
  /** Where a stdio server's PATH and HOME come from (default `process.env`); nothing else of it is passed on. */
  baseEnv?: NodeJS.ProcessEnv;
}

/**
 * The node's MCP servers: each conversation gets its own set, started on its
 * owner with its runtime and stopped with it, while one count bounds how many
 * run on the node in all (each stdio server is a process outside the sandbox).
 */
export class McpHub {
  private running = 0;

  constructor(private readonly options: McpHubOptions) {}

  /** Whether any server is configured (without any, a conversation has no MCP tools at all). */
  get configured(): boolean {
    return Object.keys(this.options.servers).length > 0;
  }

  /** Server connections running now, every conversation's together. */
  get live(): number {
    return this.running;
  }

  /**
   * Starts every configured server for one conversation, in parallel. A
   * server's problem never throws: it is in `problems` and the server offers
   * no tools. When `signal` aborts, whatever started is stopped and this
   * rejects with the abort reason.
   */
  async open(conversationId: string, workspace: string, signal?: AbortSignal): Promise<McpConnections> {
    signal?.throwIfAborted();
    // Places are taken in config order before any start, so which servers are refused does not depend on timing.
    const entries = Object.entries(this.options.servers).map(([name, config]): Entry => {
      if (this.running >= this.options.maxLive) {
        return { name, problem: `TETHER_MCP_MAX_LIVE (${this.options.maxLive}) servers already run on this node` };
      }
      this.running++;
      const { callTimeoutMs, heartbeatMs, logger, baseEnv, startTimeoutMs } = this.options;
      const connection = new McpServerConnection({
        callTimeoutMs,
        heartbeatMs,
        logger: logger ?? silentLogger,
        baseEnv: baseEnv ?? process.env,
        startTimeoutMs: startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS,
        name,
        config,
        conversationId,
        workspace,
        onEnd: () => this.running--,
      });
      return { name, connection };
    });
    const started = await Promise.all(entries.map((entry) => start(entry, signal)));
    const servers = new ConversationMcpServers(started);
    if (signal?.aborted) {
      await servers.close();
      throw signal.reason;
    }
    return servers;
  }
}

interface Entry {
  name: string;
  connection?: McpServerConnection;
  /** Why it did not start. */
  problem?: string;
}

interface Started extends Entry, McpServerTools {}

async function start(entry: Entry, signal?: AbortSignal): Promise<Started> {
  if (!entry.connection) return { ...entry, tools: [] };
  try {
    return { ...entry, tools: await entry.connection.start(signal) };
  } catch (error) {
    return { ...entry, tools: [], problem: (error as Error).message };
  }
}

/** One conversation's servers, as `McpHub.open` started them. */
class ConversationMcpServers implements McpConnections {
  readonly servers: McpServerTools[];
  readonly problems: string[];
  private readonly byName: Map<string, Started>;

  constructor(started: Started[]) {
    this.servers = started.map(({ name, tools }) => ({ name, tools }));
    this.problems = started.flatMap(({ name, problem }) =>
      problem === undefined ? [] : [`the MCP server ${name} did not start: ${problem}`],
    );
    this.byName = new Map(started.map((entry) => [entry.name, entry]));
  }

  async call(
    server: string,
    tool: string,
    args: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<McpCallResult> {
    const entry = this.byName.get(server);
    if (!entry) return failedCall(`there is no MCP server named ${server}`);
    if (!entry.connection || entry.problem !== undefined) {
      return failedCall(`the MCP server ${server} did not start: ${entry.problem}`);
    }
    return entry.connection.call(tool, args, signal);
  }

  async close(): Promise<void> {
    const connections = [...this.byName.values()].flatMap(({ connection }) => (connection ? [connection] : []));
    await Promise.all(connections.map((connection) => connection.close()));
  }
}
