import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { EventOf } from '../../protocol/index.ts';
import type { AgentAction } from './agent.ts';
import { clip, LlmResponseError } from './llmErrors.ts';

/** A tool call as chat-completions APIs write it. */
export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** One message of an OpenAI-compatible chat-completions request. */
export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

/** The assistant message of a completion, as far as Tether reads it. */
export interface AssistantReply {
  content?: string | null;
  tool_calls?:
    { id?: string | null; function: { name: string; arguments?: string | Record<string, unknown> | null } }[] | null;
}

const ToolCall = z.object({
  id: z.string().nullish(),
  function: z.object({
    name: z.string(),
    arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).nullish(),
  }),
});
const ChatCompletion = z.object({
  choices: z
    .array(z.object({ message: z.object({ content: z.string().nullish(), tool_calls: z.array(ToolCall).nullish() }) }))
    .min(1),
  usage: z.object({ prompt_tokens: z.number(), completion_tokens: z.number() }).nullish(),
});
/** A plain (not streamed) chat completion, as far as Tether reads it. */
export type ChatCompletion = z.infer<typeof ChatCompletion>;

/** `redact` cleans the body before it is quoted; JSON.parse's own error quotes it raw, so it is not kept. */
export function parseCompletion(text: string, redact: (text: string) => string): ChatCompletion {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new LlmResponseError(`the body is not JSON: ${JSON.stringify(clip(redact(text.trim()), 100))}`);
  }
  const parsed = ChatCompletion.safeParse(json);
  if (!parsed.success)
    throw new LlmResponseError('it is not a chat completion with a message', { cause: parsed.error });
  return parsed.data;
}

const stringParam = (description: string) => ({ type: 'string', description });

/** The argument every tool that acts takes: the model's own rating of the call's risk. */
export const SECURITY_RISK_PARAM = {
  type: 'string',
  enum: ['LOW', 'MEDIUM', 'HIGH'],
  description:
    "Your rating of this call's risk: LOW (reads, or changes easily undone inside the workspace), MEDIUM (changes that take work to undo), HIGH (destructive, irreversible, or reaching outside the workspace). In confirmation mode a HIGH call waits for the user.",
};

const tool = (name: string, description: string, properties: Record<string, object>) => ({
  type: 'function' as const,
  function: {
    name,
    description,
    parameters: { type: 'object', properties, required: Object.keys(properties), additionalProperties: false },
  },
});

/** The built-in functions the model may call. */
export const CHAT_TOOLS = [
  tool('run_command', 'Run one bash command in the workspace and get its exit code and output.', {
    command: stringParam('The command line, run by bash in the workspace.'),
    security_risk: SECURITY_RISK_PARAM,
  }),
  tool('read_file', 'Read a text file of the workspace.', {
    path: stringParam('Path, relative to the workspace or absolute (inside the workspace).'),
  }),
  tool('write_file', 'Create or replace a file with exactly this content; missing directories are created.', {
    path: stringParam('Path, relative to the workspace or absolute (inside the workspace).'),
    content: stringParam('The whole new content of the file.'),
    security_risk: SECURITY_RISK_PARAM,
  }),
  tool('ask_user', 'Ask the user a question and wait for the answer. Call it alone, in a reply of its own.', {
    question: stringParam('The question.'),
  }),
  tool('finish', 'Say that the task is done; the user may still ask for more. Call it alone, in a reply of its own.', {
    message: stringParam('What was done, for the user.'),
  }),
];

/** An MCP server's tools as stored (`tools_listed`). */
export type ListedServers = EventOf<'tools_listed'>['data']['servers'];

/** The name the model calls an MCP tool by. */
export function mcpToolName(server: string, tool: string): string {
  return `${server}__${tool}`;
}

/** What chat APIs accept as a function's name (OpenAI's rule): a tool whose name breaks it is not offered. */
const CHAT_TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The built-in functions, then every MCP server's tools as `<server>__<tool>`
 * (those whose name a chat API accepts: letters, digits, `_`, `-`, at most 64),
 * each taking a required `security_risk` besides its own arguments.
 */
export function chatTools(servers: ListedServers): object[] {
  const mcp = servers.flatMap((server) =>
    server.tools
      .filter((t) => CHAT_TOOL_NAME.test(mcpToolName(server.name, t.name)))
      .map((t) => {
        const schema = t.input_schema as { properties?: Record<string, unknown>; required?: unknown };
        const given: unknown[] = Array.isArray(schema.required) ? schema.required : [];
        const required = given.filter((r) => r !== 'security_risk');
        const parameters = {
          ...schema,
          type: 'object',
          properties: { ...schema.properties, security_risk: SECURITY_RISK_PARAM },
          required: [...required, 'security_risk'],
        };
        return {
          type: 'function' as const,
          function: { name: mcpToolName(server.name, t.name), description: t.description, parameters },
        };
      }),
  );
  return [...CHAT_TOOLS, ...mcp];
}

/**
 * A reply's action: no tool call is a message for the user; `ask_user` or
 * `finish` alone is a question or the end of the task; any other calls (or
 * those two among others) are the reply's calls, as made, each to be stored
 * and answered in order.
 */
export function toAgentAction(message: AssistantReply): AgentAction {
  const text = message.content?.trim() ?? '';
  const replyCalls = message.tool_calls ?? [];
  if (replyCalls.length === 0) {
    if (!text) throw new LlmResponseError('the reply has neither text nor a tool call');
    return { type: 'message', content: text };
  }
  const calls = replyCalls.map((call) => ({
    id: call.id || `call_${randomUUID()}`,
    name: call.function.name,
    arguments: toolArguments(call.function.name, call.function.arguments),
  }));
  const only = calls.length === 1 ? calls[0]! : undefined;
  if (only?.name === 'ask_user' && typeof only.arguments.question === 'string' && only.arguments.question.trim()) {
    return { type: 'message', content: only.arguments.question, callId: only.id };
  }
  if (only?.name === 'finish') {
    const summary =
      typeof only.arguments.message === 'string' && only.arguments.message.trim() ? only.arguments.message : text;
    return { type: 'finish', content: summary || 'Done.', callId: only.id };
  }
  return { type: 'calls', calls };
}

/**
 * The action of a streamed reply, whose text stays exactly as streamed: without
 * a tool call it is the message's content (not trimmed; only whitespace is no
 * message), with one it is the action's `thought` (when there is any text).
 */
export function toStreamedAction(reply: AssistantReply): AgentAction {
  const text = reply.content ?? '';
  if (!reply.tool_calls?.[0]) {
    if (!text.trim()) throw new LlmResponseError('the reply has neither text nor a tool call');
    return { type: 'message', content: text };
  }
  const action = toAgentAction(reply);
  return text ? { ...action, thought: text } : action;
}

function toolArguments(
  name: string,
  raw: string | Record<string, unknown> | null | undefined,
): Record<string, unknown> {
  if (raw === null || raw === undefined || raw === '') return {};
  if (typeof raw !== 'string') return raw;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new LlmResponseError(`the arguments of ${name} are not JSON`, { cause: err });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new LlmResponseError(`the arguments of ${name} are not a JSON object`);
  }
  return parsed as Record<string, unknown>;
}
