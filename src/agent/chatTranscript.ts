import type { EventOf, StoredEvent } from '../../protocol/index.ts';
import type { ChatMessage, ChatToolCall, ListedServers } from './llmMessages.ts';

export interface ChatMessageOptions {
  /** Longest command output sent to the model; the middle of a longer one is left out. */
  maxOutputChars?: number;
}

export const DEFAULT_MAX_OUTPUT_CHARS = 10_000;

const SYSTEM_PROMPT = [
  "You are the agent of a Tether conversation: you carry out the user's tasks in a workspace with a bash shell.",
  'Act through the tools. One reply may make several calls: they run one after another, in order, and you get every result.',
  '- run_command runs a command; the shell persists between commands (working directory, variables).',
  '- read_file and write_file read or replace a file of the workspace.',
  '- Tools named <server>__<tool> belong to MCP servers the operator configured.',
  '- Every tool that acts takes security_risk (LOW, MEDIUM or HIGH): rate each call honestly; a HIGH call may wait for the user.',
  '- ask_user asks a question and waits for the answer; finish says the task is done, with a summary. Call either alone.',
  'A plain text reply without a tool call is shown to the user and the conversation waits for them.',
  'Notes from the user that start with "[workspace]" report commands the user ran themselves and their output.',
].join('\n');

/** The tool results the model is sent for the calls that speak to the user. */
const ASKED = 'The question was shown to the user; their answer is their next message.';
const FINISHED = 'The user was told that the task is done.';

/** Id of the tool call that stands for the agent's command event `eventId`, in logs that stored none. Stable across steps. */
export function toolCallId(eventId: number): string {
  return `call_${eventId}`;
}

type AssistantMessage = Extract<ChatMessage, { role: 'assistant' }>;

/**
 * A conversation's chat messages, kept up to date one stored event at a time:
 * the LLM agent's request body, and nothing more. The agent's calls are sent
 * as made: the calls of one reply (stored one after another, with the same
 * step and attempt) are one assistant message, immediately followed by one
 * tool result per call, as chat APIs require (each the result whose `cause` is
 * the call, wherever it sits in the log, or a placeholder while there is
 * none). Commands the user ran and their outputs become user notes; lifecycle
 * events are left out. Deterministic: the same events give the same
 * messages, however they were observed.
 */
export class ChatTranscript {
  readonly #maxChars: number;
  readonly #messages: ChatMessage[] = [{ role: 'system', content: systemPrompt(undefined) }];
  #instructions: string | undefined;
  #repositoryFiles: EventOf<'instructions_loaded'>['data']['files'] = [];
  #servers: ListedServers = [];
  readonly #agentCalls = new Set<number>();
  /** Where the tool result of each agent call still without one sits in `#messages`. */
  readonly #placeholders = new Map<number, number>();
  /** The reply whose calls were observed last, while nothing else came after them. */
  #reply: { key: string; message: AssistantMessage } | null = null;

  constructor(options: ChatMessageOptions = {}) {
    this.#maxChars = options.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  }

  /** The system prompt, then one or more messages per event that the model sees. Live: it grows as events are observed. */
  get messages(): readonly ChatMessage[] {
    return this.#messages;
  }

  /** The MCP servers' tools the model is offered: the last `tools_listed`. */
  get servers(): ListedServers {
    return this.#servers;
  }

  observe(event: StoredEvent): void {
    switch (event.type) {
      case 'conversation_created':
        this.#instructions ??= event.data.instructions;
        this.#messages[0] = { role: 'system', content: systemPrompt(this.#instructions, this.#repositoryFiles) };
        break;
      // Read once, after the clone, and stored: a restart, a replay or a fork tells the agent the same.
      case 'instructions_loaded':
        this.#repositoryFiles = event.data.files;
        this.#messages[0] = { role: 'system', content: systemPrompt(this.#instructions, this.#repositoryFiles) };
        break;
      case 'tools_listed':
        this.#servers = event.data.servers;
        break;
      case 'message':
        if (event.source === 'agent' && event.data.call_id !== undefined) {
          this.#call(event, event.data.call_id, 'ask_user', { question: event.data.content }, ASKED);
        } else this.#push({ role: event.source === 'agent' ? 'assistant' : 'user', content: event.data.content });
        break;
      case 'finish':
        if (event.data.call_id !== undefined) {
          this.#call(event, event.data.call_id, 'finish', { message: event.data.content }, FINISHED);
        } else this.#push({ role: 'assistant', content: event.data.content });
        break;
      case 'command':
        if (event.source === 'agent') {
          const { command, security_risk: risk } = event.data;
          const args = { command, ...(risk !== undefined && risk !== 'UNKNOWN' && { security_risk: risk }) };
          this.#call(event, event.data.call_id ?? toolCallId(event.id), 'run_command', args);
        } else
          this.#push({
            role: 'user',
            content: `[workspace] I ran this command myself:\n${fenced(event.data.command)}`,
          });
        break;
      case 'tool_call':
        this.#call(event, event.data.call_id, event.data.tool, event.data.arguments);
        break;
      case 'command_output':
        this.#output(event);
        break;
      case 'tool_result':
        this.#answer(
          event.cause,
          `${event.data.is_error ? 'Error: ' : ''}${clipMiddle(event.data.output, this.#maxChars)}`,
        );
        break;
      default:
        break;
    }
  }

  #push(message: ChatMessage): void {
    this.#reply = null;
    this.#messages.push(message);
  }

  /**
   * One call of the agent: a new assistant message, or one more call of the
   * reply observed just before (same step, same attempt), with its result's
   * place after the reply's other results. `result` answers it at once.
   */
  #call(
    event: EventOf<'command' | 'tool_call' | 'message' | 'finish'>,
    id: string,
    name: string,
    args: Record<string, unknown>,
    result?: string,
  ): void {
    const call: ChatToolCall = { id, type: 'function', function: { name, arguments: JSON.stringify(args) } };
    const key = `${event.cause}:${event.data.item_id}:${event.data.attempt}`;
    const thought = 'thought' in event.data ? event.data.thought : undefined;
    if (this.#reply?.key === key && event.data.item_id !== undefined && result === undefined) {
      this.#reply.message.tool_calls!.push(call);
    } else {
      const message: AssistantMessage = { role: 'assistant', content: thought ?? null, tool_calls: [call] };
      this.#push(message);
      this.#reply = { key, message };
    }
    this.#agentCalls.add(event.id);
    const placeholder = `No result was recorded for this ${name === 'run_command' ? 'command' : 'call'}.`;
    this.#messages.push({ role: 'tool', tool_call_id: id, content: result ?? placeholder });
    if (result === undefined) this.#placeholders.set(event.id, this.#messages.length - 1);
    else this.#reply = null;
  }

  /** The first result of an agent call fills its place; a later one is left out. */
  #answer(cause: number | undefined, content: string): void {
    const at = cause === undefined ? undefined : this.#placeholders.get(cause);
    if (at === undefined) return;
    this.#placeholders.delete(cause!);
    const message = this.#messages[at] as Extract<ChatMessage, { role: 'tool' }>;
    this.#messages[at] = { ...message, content };
  }

  #output(event: EventOf<'command_output'>): void {
    const cause = event.cause;
    if (cause === undefined || !this.#agentCalls.has(cause)) {
      this.#push({
        role: 'user',
        content: `[workspace] Result of my command ${inline(event.data.command)}:\n${describeOutput(event.data, this.#maxChars)}`,
      });
      return;
    }
    this.#answer(cause, describeOutput(event.data, this.#maxChars));
  }
}

/** The chat messages for a whole history at once (a fresh transcript that observed it). */
export function toChatMessages(history: Iterable<StoredEvent>, options: ChatMessageOptions = {}): ChatMessage[] {
  const transcript = new ChatTranscript(options);
  for (const event of history) transcript.observe(event);
  return [...transcript.messages];
}

/** The system prompt: the agent's rules, then the repository's instruction files, then the conversation's own. */
function systemPrompt(
  instructions: string | undefined,
  files: EventOf<'instructions_loaded'>['data']['files'] = [],
): string {
  const parts = [SYSTEM_PROMPT];
  for (const file of files) {
    const cut = file.truncated ? `\n[cut: the file has ${file.bytes} bytes]` : '';
    parts.push(`Instructions from the repository's ${file.path}:\n${file.text}${cut}`);
  }
  if (instructions?.trim()) parts.push(`Instructions for this conversation:\n${instructions}`);
  return parts.join('\n\n');
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
