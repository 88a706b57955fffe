import { z } from 'zod';
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
  tool_calls?: { function: { name: string; arguments?: string | Record<string, unknown> | null } }[] | null;
}

const ToolCall = z.object({
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
const tool = (name: string, description: string, properties: Record<string, object>) => ({
  type: 'function' as const,
  function: {
    name,
    description,
    parameters: { type: 'object', properties, required: Object.keys(properties), additionalProperties: false },
  },
});

/** The functions the model may call; `llmAgent` turns each call into one AgentAction. */
export const CHAT_TOOLS = [
  tool('run_command', 'Run one bash command in the workspace and get its exit code and output.', {
    command: stringParam('The command line, run by bash in the workspace.'),
  }),
  tool('read_file', 'Read a text file of the workspace.', {
    path: stringParam('Path, relative to the workspace or absolute.'),
  }),
  tool('write_file', 'Create or replace a file with exactly this content; missing directories are created.', {
    path: stringParam('Path, relative to the workspace or absolute.'),
    content: stringParam('The whole new content of the file.'),
  }),
  tool('ask_user', 'Ask the user a question and wait for the answer.', { question: stringParam('The question.') }),
  tool('finish', 'Say that the task is done; the user may still ask for more.', {
    message: stringParam('What was done, for the user.'),
  }),
];

/**
 * The first tool call becomes the action (an AgentAction is one move); a reply
 * without tool calls is a message for the user.
 */
export function toAgentAction(message: AssistantReply): AgentAction {
  const call = message.tool_calls?.[0];
  const text = message.content?.trim() ?? '';
  if (!call) {
    if (!text) throw new LlmResponseError('the reply has neither text nor a tool call');
    return { type: 'message', content: text };
  }
  const { name } = call.function;
  const args = toolArguments(name, call.function.arguments);
  switch (name) {
    case 'run_command':
      return { type: 'run', command: requireString(name, args, 'command') };
    case 'read_file':
      return { type: 'run', command: readFileCommand(requireString(name, args, 'path')) };
    case 'write_file':
      return {
        type: 'run',
        command: writeFileCommand(requireString(name, args, 'path'), requireString(name, args, 'content', true)),
      };
    case 'ask_user':
      return { type: 'message', content: requireString(name, args, 'question') };
    case 'finish': {
      const summary = typeof args.message === 'string' && args.message.trim() ? args.message : text;
      return { type: 'finish', content: summary || 'Done.' };
    }
    default:
      throw new LlmResponseError(`the model called an unknown tool ${JSON.stringify(name)}`);
  }
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

function requireString(tool: string, args: Record<string, unknown>, key: string, allowEmpty = false): string {
  const value = args[key];
  if (typeof value !== 'string' || (!allowEmpty && value.trim() === '')) {
    throw new LlmResponseError(`${tool} needs a ${allowEmpty ? '' : 'non-empty '}string "${key}"`);
  }
  return value;
}

/** One shell word holding exactly `text`: single quotes, each `'` written as `'\''`. */
export function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

export function readFileCommand(path: string): string {
  return `cat -- ${shellQuote(path)}`;
}

/**
 * Writes `content` byte for byte: `printf %s` adds no newline and interprets
 * nothing, and a quoted word has no delimiter the content could collide with.
 */
export function writeFileCommand(path: string, content: string): string {
  if (content.includes('\0'))
    throw new LlmResponseError('write_file content contains a NUL character, which a shell word cannot hold');
  const target = shellQuote(path);
  return `mkdir -p -- "$(dirname -- ${target})" && printf '%s' ${shellQuote(content)} > ${target}`;
}
