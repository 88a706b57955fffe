import type { StoredEvent } from '../protocol/index.ts';
import type { DeltaFrame } from '../src/client/index.ts';
import { h } from './dom.ts';
import { ReplyStream, type ReplyChange } from './replyStream.ts';

/**
 * The agent's reply as it is written: a provisional bubble, last in the
 * chat, marked `streaming`, whose one text node grows by each delta (no
 * re-render per delta). The stored event that ends the item takes its place.
 */
export class ReplyBubble {
  readonly #chat: HTMLElement;
  readonly #stream = new ReplyStream();
  #bubble: HTMLElement | null = null;
  #text: Text | null = null;
  #scrolling = false;

  constructor(chat: HTMLElement) {
    this.#chat = chat;
  }

  /** Where a stored item or a status line goes: before the bubble, which stays last. */
  get anchor(): Node | null {
    return this.#bubble;
  }

  delta(frame: DeltaFrame): void {
    this.#apply(this.#stream.delta(frame));
  }

  stored(event: StoredEvent): void {
    this.#apply(this.#stream.stored(event));
  }

  /** The agent is no longer running: a reply not stored by now was given up. */
  stopped(): void {
    this.#apply(this.#stream.stopped());
  }

  #apply(change: ReplyChange | null): void {
    if (change === null) return;
    if (change.type === 'clear' || (change.type === 'show' && change.text === '')) {
      this.#bubble?.remove();
      this.#bubble = this.#text = null;
      return;
    }
    if (change.type === 'append') {
      this.#text?.appendData(change.text);
    } else {
      this.#text ??= document.createTextNode('');
      this.#text.data = change.text;
      this.#bubble ??= h(
        'div',
        { class: 'msg agent streaming', 'data-testid': 'streaming', 'aria-busy': 'true' },
        h('span', { class: 'who' }, 'agent · writing'),
        this.#text,
      );
      this.#bubble.dataset.item = change.itemId;
      this.#bubble.dataset.attempt = String(change.attempt);
      if (!this.#bubble.isConnected) this.#chat.append(this.#bubble);
    }
    this.#scroll();
  }

  /** Keeps the chat at its end, once a frame however many deltas came. */
  #scroll(): void {
    if (this.#scrolling) return;
    this.#scrolling = true;
    requestAnimationFrame(() => {
      this.#scrolling = false;
      this.#chat.scrollTop = this.#chat.scrollHeight;
    });
  }
}
