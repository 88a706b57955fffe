import { BUSY_AGENT_STATES } from '../machines/index.ts';
import type { AgentState, StoredEvent } from '../protocol/index.ts';
import { h } from './dom.ts';

export const BUSY_TEXT = 'The agent is busy: this conversation rejects messages while it works. Wait, or interrupt it.';

/**
 * The answer to a message refused with `AGENT_BUSY` (the conversation's
 * `double_texting` is `reject` and the agent works): a notice that says so,
 * and the refused text back in the box, so that nothing typed is lost. The
 * `error` frame names the refused action's `client_id`; the text given back
 * is the one sent with it (without one: the last sent whose stored message
 * has not come).
 */
export class BusyNotice {
  readonly element = h('div', { class: 'notice busy', 'data-testid': 'busy', role: 'status', hidden: true });
  readonly #input: HTMLTextAreaElement;
  /** The messages sent whose stored message has not come, oldest first, with their `client_id`. */
  readonly #unanswered: Array<{ text: string; clientId: string | null }> = [];

  constructor(input: HTMLTextAreaElement) {
    this.#input = input;
  }

  /** A message was sent with this text (and this `client_id`). */
  sent(text: string, clientId: string | null = null): void {
    this.#unanswered.push({ text, clientId });
  }

  /** A stored event came: a user message with a text sent here was not refused. */
  stored(event: StoredEvent): void {
    if (event.type !== 'message' || event.source !== 'user') return;
    const index = this.#unanswered.findIndex((sent) => sent.text === event.data.content);
    if (index >= 0) this.#unanswered.splice(index, 1);
  }

  /** A message was refused with `AGENT_BUSY` (the server's `message` says why; `clientId` names it). */
  refused(message: string, clientId?: string): void {
    this.element.textContent = BUSY_TEXT;
    this.element.title = message;
    this.element.hidden = false;
    const at =
      clientId === undefined
        ? this.#unanswered.length - 1
        : this.#unanswered.findIndex((sent) => sent.clientId === clientId);
    const text = at < 0 ? undefined : this.#unanswered.splice(at, 1)[0]!.text;
    if (text === undefined) return;
    // In front of anything typed since, as it was written before it.
    this.#input.value = this.#input.value.trim() ? `${text}\n${this.#input.value}` : text;
  }

  /** The agent's state now: once it no longer works, a message would be taken and the notice goes. */
  agentState(state: AgentState): void {
    if (!BUSY_AGENT_STATES.has(state)) this.element.hidden = true;
  }
}
