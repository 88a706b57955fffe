import { setTimeout as delay } from 'node:timers/promises';
import type { EventOf, StoredEvent } from '../../protocol/index.ts';
import type { Agent, AgentAction, AgentContext, AgentStepInput } from './agent.ts';

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
 * history gives the same action. It answers the oldest user message or command output
 * that has no answer yet: `!<command>` runs the command, a command's output gets a short
 * summary, anything else an acknowledgement that says how to run commands. When more
 * wait behind it, its message goes on (`waitForResponse: false`) so each gets its step.
 * It rates its commands LOW, as a model that trusts its user would: the rules'
 * floor still holds a destructive one for confirmation.
 */
export interface ScriptedAgentOptions {
  /** Think time before each answer, so a demo (or a test) can catch the agent mid-step. */
  delayMs?: number;
  /** Stream each message a few words per delta, this far apart (0: no deltas). */
  deltaMs?: number;
}

export class ScriptedAgent implements Agent {
  readonly #options: ScriptedAgentOptions;

  constructor(options: ScriptedAgentOptions = {}) {
    this.#options = options;
  }

  context(): AgentContext {
    return new ScriptedContext(this.#options.delayMs ?? 0, this.#options.deltaMs ?? 0);
  }
}

export function scriptedAgent(options: ScriptedAgentOptions = {}): ScriptedAgent {
  return new ScriptedAgent(options);
}

/** Words per delta of a streamed scripted reply. */
const WORDS_PER_DELTA = 3;

/** `text` in pieces of a few words, whitespace kept, so the pieces joined are `text`. */
export function wordPieces(text: string, words = WORDS_PER_DELTA): string[] {
  const tokens = text.split(/(?<=\s)(?=\S)/);
  const pieces: string[] = [];
  for (let i = 0; i < tokens.length; i += words) pieces.push(tokens.slice(i, i + words).join(''));
  return pieces.filter((piece) => piece !== '');
}

type Cue = { kind: 'user'; text: string } | { kind: 'output'; output: EventOf<'command_output'> };

/**
 * What still waits for an answer, oldest first, kept up to date one event at
 * a time. Every user message, and the output of every command the agent ran,
 * gets exactly one answer (an agent message, command or finish), in order:
 * messages that queue up while the agent works are each answered on a later
 * step, none is skipped. It holds the unanswered cues and the ids of the
 * agent's commands (to know their outputs), never the events themselves.
 */
class ScriptedContext implements AgentContext {
  readonly #delayMs: number;
  readonly #deltaMs: number;
  readonly #pending: Cue[] = [];
  readonly #agentCommands = new Set<number>();
  #agentSpoke = false;

  constructor(delayMs: number, deltaMs: number) {
    this.#delayMs = delayMs;
    this.#deltaMs = deltaMs;
  }

  observe(event: StoredEvent): void {
    if (event.source === 'agent') this.#agentSpoke = true;
    if (event.source === 'agent' && (event.type === 'message' || event.type === 'command' || event.type === 'finish')) {
      this.#pending.shift();
      if (event.type === 'command') this.#agentCommands.add(event.id);
    } else if (event.type === 'message' && event.source === 'user') {
      this.#pending.push({ kind: 'user', text: event.data.content });
    } else if (event.type === 'command_output' && event.cause !== undefined && this.#agentCommands.has(event.cause)) {
      this.#pending.push({ kind: 'output', output: event });
    }
  }

  async step({ signal, onDelta }: AgentStepInput = {}): Promise<AgentAction> {
    signal?.throwIfAborted();
    if (this.#delayMs > 0) await delay(this.#delayMs, undefined, { signal });
    // After the think time: a message stored meanwhile waits behind this answer.
    const action = this.#nextAction();
    if (this.#deltaMs > 0 && onDelta && (action.type === 'message' || action.type === 'finish')) {
      for (const [i, piece] of wordPieces(action.content).entries()) {
        if (i > 0) await delay(this.#deltaMs, undefined, { signal });
        onDelta(piece);
      }
    }
    return action;
  }

  #nextAction(): AgentAction {
    const [cue] = this.#pending;
    const action =
      cue?.kind === 'user' ? answerUser(cue.text) : cue && { type: 'message' as const, content: summarise(cue.output) };
    // More cues wait: say so, and the session takes another step for the next one.
    if (action?.type === 'message' && this.#pending.length > 1) return { ...action, waitForResponse: false };
    if (action) return action;
    if (this.#agentSpoke) {
      return { type: 'finish', content: 'Done. Send another message, or "!<command>" to run one.' };
    }
    return { type: 'message', content: `Hello! ${HELP}` };
  }
}

function answerUser(text: string): AgentAction {
  const trimmed = text.trim();
  if (trimmed.startsWith('!')) {
    const command = trimmed.slice(1).trim();
    if (command) return { type: 'run', command, securityRisk: 'LOW' };
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
