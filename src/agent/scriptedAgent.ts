import type { EventOf, StoredEvent } from '../protocol/index.ts';
import type { Agent, AgentAction, AgentStepInput } from './agent.ts';

const OUTPUT_CHARS = 2_000;
const OUTPUT_LINES = 40;
const ECHO_CHARS = 200;

const HOW_TO_RUN =
  'To run a shell command in this conversation\'s workspace, start a message with "!", ' +
  'for example "!ls -la", or send a run action.';

const HELP =
  'I am the scripted agent: I do not call a language model, I follow a fixed script. ' +
  `${HOW_TO_RUN} I will run it and tell you its exit code and the first lines of its output.`;

/**
 * The agent used when no LLM is configured. Deterministic and without I/O: the same
 * history gives the same action. It answers the latest user message or command output:
 * `!<command>` runs the command, a command's output gets a short summary, anything else
 * an acknowledgement that says how to run commands.
 */
export class ScriptedAgent implements Agent {
  async step({ history, signal }: AgentStepInput): Promise<AgentAction> {
    signal?.throwIfAborted();
    return nextAction(history);
  }
}

export function scriptedAgent(): ScriptedAgent {
  return new ScriptedAgent();
}

type Cue =
  | { kind: 'user'; text: string }
  | { kind: 'output'; output: EventOf<'command_output'> }
  | { kind: 'answered' }
  | { kind: 'none' };

function nextAction(history: readonly StoredEvent[]): AgentAction {
  const cue = latestCue(history);
  switch (cue.kind) {
    case 'user':
      return answerUser(cue.text);
    case 'output':
      return { type: 'message', content: summarise(cue.output) };
    case 'answered':
      return { type: 'finish', content: 'Done. Send another message, or "!<command>" to run one.' };
    case 'none':
      return { type: 'message', content: `Hello! ${HELP}` };
  }
}

/**
 * The newest event the agent should react to, skipping lifecycle events. If the agent
 * already spoke or ran a command after it, the cue is answered: stepping again finishes
 * instead of repeating itself.
 */
function latestCue(history: readonly StoredEvent[]): Cue {
  let answered = false;
  for (let i = history.length - 1; i >= 0; i--) {
    const event = history[i]!;
    if (event.source === 'agent' && (event.type === 'message' || event.type === 'command')) answered = true;
    const cue = cueOf(event);
    if (cue) return answered ? { kind: 'answered' } : cue;
  }
  return answered ? { kind: 'answered' } : { kind: 'none' };
}

function cueOf(event: StoredEvent): Cue | undefined {
  if (event.type === 'message' && event.source === 'user') return { kind: 'user', text: event.data.content };
  if (event.type === 'command_output') return { kind: 'output', output: event };
  // An initial message may live only in the creation event.
  if (event.type === 'conversation_created' && event.data.initial_message !== undefined) {
    return { kind: 'user', text: event.data.initial_message };
  }
  return undefined;
}

function answerUser(text: string): AgentAction {
  const trimmed = text.trim();
  if (trimmed.startsWith('!')) {
    const command = trimmed.slice(1).trim();
    if (command) return { type: 'run', command };
    return { type: 'message', content: 'There is nothing to run after the "!". Try "!ls".' };
  }
  if (/^(help|\/help|\?)$/i.test(trimmed)) return { type: 'message', content: HELP };
  return { type: 'message', content: `You said: "${clip(trimmed, ECHO_CHARS)}". ${HOW_TO_RUN}` };
}

function summarise({ data }: EventOf<'command_output'>): string {
  const head = `\`${clip(firstLine(data.command), ECHO_CHARS)}\``;
  const status = data.timed_out
    ? `${head} timed out.`
    : data.exit_code === null
      ? `${head} was interrupted.`
      : `${head} exited with code ${data.exit_code}.`;
  if (data.output.trim() === '') return `${status} It printed nothing.`;
  const { text, cut } = firstLines(data.output);
  const note = cut || data.truncated ? '\n(output shortened)' : '';
  return `${status} Output:\n\`\`\`\n${text}\n\`\`\`${note}`;
}

function firstLines(output: string): { text: string; cut: boolean } {
  const trimmed = output.replace(/\n+$/, '');
  const lines = trimmed.split('\n');
  let text = lines.slice(0, OUTPUT_LINES).join('\n');
  text = clip(text, OUTPUT_CHARS);
  return { text, cut: text !== trimmed };
}

function firstLine(text: string): string {
  const [first = '', ...rest] = text.split('\n');
  return rest.length ? `${first} …` : first;
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}
