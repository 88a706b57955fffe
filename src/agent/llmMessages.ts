import type { EventOf, StoredEvent } from '../protocol/index.ts';
import type { AgentAction } from './agent.ts';
import { LlmResponseError } from './llmErrors.ts';

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

export interface ChatMessageOptions {
  /** Longest command output sent to the model; the middle of a longer one is left out. */
  maxOutputChars?: number;
}

export const DEFAULT_MAX_OUTPUT_CHARS = 10_000;

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

const SYSTEM_PROMPT = [
  "You are the agent of a Tether conversation: you carry out the user's tasks in a workspace with a bash shell.",
  'Act through the tools, one call per reply:',
  '- run_command runs a command; the shell persists between commands (working directory, variables).',
  '- read_file and write_file read or replace a file; they run as shell commands, so they appear as run_command calls in the history.',
  '- ask_user asks a question and waits for the answer; finish says the task is done, with a summary.',
  'A plain text reply without a tool call is shown to the user and the conversation waits for them.',
  'Notes from the user that start with "[workspace]" report commands the user ran themselves and their output.',
].join('\n');

/** Id of the tool call that stands for the agent's command event `eventId`. Stable across steps. */
export function toolCallId(eventId: number): string {
  return `call_${eventId}`;
}

/**
 * The chat messages for a conversation's history. Deterministic: the same
 * history always gives the same messages. A command of the agent becomes an
 * assistant `run_command` call, immediately followed by its tool result (the
 * output whose `cause` is the command, wherever it sits in the log, or a
 * placeholder while there is none), as chat APIs require. Commands the user ran
 * and their outputs become user notes; lifecycle events are left out.
 */
export function toChatMessages(history: readonly StoredEvent[], options: ChatMessageOptions = {}): ChatMessage[] {
  const maxChars = options.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  const outputs = new Map<number, EventOf<'command_output'>>();
  const agentCommands = new Set<number>();
  for (const event of history) {
    if (event.type === 'command_output' && event.cause !== undefined && !outputs.has(event.cause))
      outputs.set(event.cause, event);
    if (event.type === 'command' && event.source === 'agent') agentCommands.add(event.id);
  }
  let instructions: string | undefined;
  const messages: ChatMessage[] = [];
  for (const event of history) {
    switch (event.type) {
      case 'conversation_created':
        instructions ??= event.data.instructions;
        break;
      case 'message':
      case 'finish':
        messages.push(
          event.source === 'agent'
            ? { role: 'assistant', content: event.data.content }
            : { role: 'user', content: event.data.content },
        );
        break;
      case 'command':
        if (event.source === 'agent') messages.push(...agentCommand(event, outputs.get(event.id), maxChars));
        else
          messages.push({
            role: 'user',
            content: `[workspace] I ran this command myself:\n${fenced(event.data.command)}`,
          });
        break;
      case 'command_output':
        if (event.cause === undefined || !agentCommands.has(event.cause)) {
          messages.push({
            role: 'user',
            content: `[workspace] Result of my command ${inline(event.data.command)}:\n${describeOutput(event.data, maxChars)}`,
          });
        }
        break;
      default:
        break;
    }
  }
  return [{ role: 'system', content: systemPrompt(instructions) }, ...messages];
}

function systemPrompt(instructions: string | undefined): string {
  if (!instructions?.trim()) return SYSTEM_PROMPT;
  return `${SYSTEM_PROMPT}\n\nInstructions for this conversation:\n${instructions}`;
}

function agentCommand(
  command: EventOf<'command'>,
  output: EventOf<'command_output'> | undefined,
  maxChars: number,
): ChatMessage[] {
  const id = toolCallId(command.id);
  const call: ChatToolCall = {
    id,
    type: 'function',
    function: { name: 'run_command', arguments: JSON.stringify({ command: command.data.command }) },
  };
  const result = output ? describeOutput(output.data, maxChars) : 'No result was recorded for this command.';
  return [
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: id, content: result },
  ];
}

/** Exit status first, then the output, its middle left out when it is too long. */
export function describeOutput(data: EventOf<'command_output'>['data'], maxChars: number): string {
  const status = data.timed_out
    ? 'The command timed out.'
    : data.exit_code === null
      ? 'The command did not finish.'
      : `Exit code: ${data.exit_code}`;
  const note = data.truncated ? '\n(The runtime kept only the start of the output.)' : '';
  if (data.output === '') return `${status}\n(no output)${note}`;
  return `${status}\nOutput:\n${clipMiddle(data.output, maxChars)}${note}`;
}

/** Keeps the head and the tail, where commands usually say what happened. */
export function clipMiddle(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  const head = Math.ceil(maxChars / 2);
  const tail = maxChars - head;
  const omitted = text.length - head - tail;
  return `${text.slice(0, head)}\n[... ${omitted} characters left out ...]\n${tail > 0 ? text.slice(-tail) : ''}`;
}

function fenced(text: string): string {
  return `\`\`\`\n${text}\n\`\`\``;
}

function inline(command: string): string {
  const first = command.split('\n')[0] ?? '';
  return `\`${first.length > 200 || first !== command ? `${first.slice(0, 200)} …` : first}\``;
}

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
