/** One tool of an MCP server, as an LLM is offered it. */
export interface McpToolInfo {
  name: string;
  /** '' when the server gave none. */
  description: string;
  /** The tool's `inputSchema` (a JSON Schema object), as the server gave it. */
  input_schema: Record<string, unknown>;
}

/** A configured server and what it offers (nothing when it did not start). */
export interface McpServerTools {
  name: string;
  tools: McpToolInfo[];
}

/** What a tool call gives back: its output as text, and whether it failed. */
export interface McpCallResult {
  output: string;
  isError: boolean;
  /** The call reached no result of the tool's own (the server is gone, did not start, timed out, refused). */
  failed?: true;
}

/** The MCP servers of one conversation, started together and stopped together. */
export interface McpConnections {
  /**
   * Every configured server in config order, with its tools (every page of
   * the server's list); a server that failed to start or list has `tools: []`.
   */
  readonly servers: McpServerTools[];
  /** Problems in words, one per server that failed to start ("the MCP server fs did not start: ..."), for a status line. */
  readonly problems: string[];
  /**
   * Calls one tool. Never throws for a server's problem (not running, died
   * mid-call, timed out, refused, the tool's own error): the result says in
   * words what happened, with `isError`. When `signal` aborts, the call stops
   * and its promise rejects with the abort reason.
   */
  call(server: string, tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpCallResult>;
  /** Stops every server of the conversation (a stdio server's whole process group). Idempotent. */
  close(): Promise<void>;
}

/** A call that did not reach a result: the words go to the LLM as the tool's output. */
export function failedCall(output: string): McpCallResult {
  return { output, isError: true, failed: true };
}
