import type { EventOf, StoredEvent } from '../../protocol/index.ts';
import type { ChatMessage, ChatToolCall } from './llmMessages.ts';

export interface ChatMessageOptions {
  /** Longest command output sent to the model; the middle of a longer one is left out. */
  maxOutputChars?: number;
}

export const DEFAULT_MAX_OUTPUT_CHARS = 10_000;

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
 * A conversation's chat messages, kept up to date one stored event at a time:
 * the LLM agent's request body, and nothing more. A command of the agent
 * becomes an assistant `run_command` call, immediately followed by its tool
 * result (the first output whose `cause` is the command, wherever it sits in
 * the log, or a placeholder while there is none), as chat APIs require.
 * Commands the user ran and their outputs become user notes; lifecycle events
 * are left out. Deterministic: the same events give the same messages, however
 * they were observed.
 */
export class ChatTranscript {
  readonly #maxChars: number;
  readonly #messages: ChatMessage[] = [{ role: 'system', content: systemPrompt(undefined) }];
  #instructions: string | undefined;
  #repositoryFiles: EventOf<'instructions_loaded'>['data']['files'] = [];
  readonly #agentCommands = new Set<number>();
  /** Where the tool result of each agent command still without output sits in `#messages`. */
  readonly #placeholders = new Map<number, number>();

  constructor(options: ChatMessageOptions = {}) {
    this.#maxChars = options.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  }

  /** The system prompt, then one or two messages per event that the model sees. Live: it grows as events are observed. */
  get messages(): readonly ChatMessage[] {
    return this.#messages;
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
      case 'message':
      case 'finish':
        this.#messages.push(
          event.source === 'agent'
            ? { role: 'assistant', content: event.data.content }
            : { role: 'user', content: event.data.content },
        );
        break;
      case 'command':
        if (event.source === 'agent') {
          this.#agentCommands.add(event.id);
          this.#messages.push(...agentCommand(event, undefined, this.#maxChars));
          this.#placeholders.set(event.id, this.#messages.length - 1);
        } else
          this.#messages.push({
            role: 'user',
            content: `[workspace] I ran this command myself:\n${fenced(event.data.command)}`,
          });
        break;
      case 'command_output':
        this.#output(event);
        break;
      default:
        break;
    }
  }

  #output(event: EventOf<'command_output'>): void {
    const cause = event.cause;
    if (cause === undefined || !this.#agentCommands.has(cause)) {
      this.#messages.push({
        role: 'user',
        content: `[workspace] Result of my command ${inline(event.data.command)}:\n${describeOutput(event.data, this.#maxChars)}`,
      });
      return;
    }
    // The first output of an agent command fills its tool result; a later one is left out.
    const at = this.#placeholders.get(cause);
    if (at === undefined) return;
    this.#placeholders.delete(cause);
    this.#messages[at] = {
      role: 'tool',
      tool_call_id: toolCallId(cause),
      content: describeOutput(event.data, this.#maxChars),
    };
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
