import { BUSY_AGENT_STATES } from '../machines/index.ts';
import type { AgentState, StoredEvent } from '../protocol/index.ts';
import { h } from './dom.ts';

export const BUSY_TEXT = 'The agent is busy: this conversation rejects messages while it works. Wait, or interrupt it.';

/**
 * The answer to a message refused with `AGENT_BUSY` (the conversation's
 * `double_texting` is `reject` and the agent works): a notice that says so,
 * and the refused text back in the box, so that nothing typed is lost. An
 * `error` frame does not say which action it answers: the text given back is
 * the last one sent whose stored message has not come.
 */
export class BusyNotice {
  readonly element = h('div', { class: 'notice busy', 'data-testid': 'busy', role: 'status', hidden: true });
  readonly #input: HTMLTextAreaElement;
  /** The texts of the messages sent whose stored message has not come, oldest first. */
  readonly #unanswered: string[] = [];

  constructor(input: HTMLTextAreaElement) {
    this.#input = input;
  }

  /** A message was sent with this text. */
  sent(text: string): void {
    this.#unanswered.push(text);
  }

  /** A stored event came: a user message with a text sent here was not refused. */
  stored(event: StoredEvent): void {
    if (event.type !== 'message' || event.source !== 'user') return;
    const index = this.#unanswered.indexOf(event.data.content);
    if (index >= 0) this.#unanswered.splice(index, 1);
  }

  /** A message was refused with `AGENT_BUSY` (the server's `message` says why). */
  refused(message: string): void {
    this.element.textContent = BUSY_TEXT;
    this.element.title = message;
    this.element.hidden = false;
    const text = this.#unanswered.pop();
    if (text === undefined) return;
    // In front of anything typed since, as it was written before it.
    this.#input.value = this.#input.value.trim() ? `${text}\n${this.#input.value}` : text;
  }

  /** The agent's state now: once it no longer works, a message would be taken and the notice goes. */
  agentState(state: AgentState): void {
    if (!BUSY_AGENT_STATES.has(state)) this.element.hidden = true;
  }
}
