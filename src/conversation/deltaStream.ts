import type { Streamed } from '../../machines/index.ts';
import type { DeltaFrame } from '../../protocol/index.ts';
import { SECRET_MASK } from './secretMasker.ts';

/**
 * The deltas of one attempt of one agent step, on the node that runs it:
 * numbered from 0, masked, sent to every node as they come, and kept until
 * the next attempt begins, so any node can catch a client up from index 0.
 *
 * Masking works on the text as it streams: a piece that ends with what may be
 * the beginning of a secret is held back until the next piece (or the end)
 * says whether it is one, so a secret split across pieces is masked too, and
 * the deltas joined equal the stored, masked content.
 */
export class DeltaStream {
  readonly itemId: string;
  readonly attempt: number;
  readonly #frames: DeltaFrame[] = [];
  readonly #secrets: readonly string[];
  readonly #send: (frame: DeltaFrame) => void;
  #held = '';
  /** Cut: the state no longer waits for this attempt, so nothing more of it goes out. */
  #closed = false;
  /** Held while a decision that cuts it is being stored: what it streams meanwhile waits here. */
  #waiting: string[] | null = null;

  constructor(itemId: string, attempt: number, secrets: readonly string[], send: (frame: DeltaFrame) => void) {
    this.itemId = itemId;
    this.attempt = attempt;
    this.#secrets = secrets;
    this.#send = send;
  }

  /** Deltas sent so far. */
  get count(): number {
    return this.#frames.length;
  }

  /** The deltas sent so far, from index 0. */
  get frames(): readonly DeltaFrame[] {
    return this.#frames;
  }

  /** The next piece of the reply's text. */
  push(text: string): void {
    if (this.#secrets.length === 0) return this.#emit(text);
    const masked = mask(this.#held + text, this.#secrets);
    const keep = secretPrefixAtEnd(masked, this.#secrets);
    this.#held = masked.slice(masked.length - keep);
    this.#emit(masked.slice(0, masked.length - keep));
  }

  /**
   * A decision that cuts the attempt is being stored: what it streams from now
   * on waits, to be dropped (`close`) or sent after all (`release`, when the
   * decision was a duplicate and stored nothing).
   */
  hold(): void {
    this.#waiting ??= [];
  }

  /** Sends what waited while held, and streams on. */
  release(): void {
    const waiting = this.#waiting ?? [];
    this.#waiting = null;
    for (const text of waiting) this.#emit(text);
  }

  /**
   * The attempt was cut (an interrupt, a stop): what it streams from now on
   * is dropped, so what clients saw is exactly what the cut stored.
   */
  close(): void {
    this.#closed = true;
    this.#held = '';
    this.#waiting = null;
  }

  /** The reply is complete: whatever was held back goes out. */
  end(): void {
    const rest = this.#held;
    this.#held = '';
    this.#emit(rest);
  }

  #emit(text: string): void {
    if (text === '' || this.#closed) return;
    if (this.#waiting) {
      this.#waiting.push(text);
      return;
    }
    const frame: DeltaFrame = {
      type: 'delta',
      item_id: this.itemId,
      attempt: this.attempt,
      index: this.#frames.length,
      text,
    };
    this.#frames.push(frame);
    this.#send(frame);
  }
}

/** Longer secrets first, as `secretMasker` does, so one that contains another is masked whole. */
function mask(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(SECRET_MASK);
  return out;
}

/** The length of the longest end of `text` that is the beginning (not the whole) of a secret. */
function secretPrefixAtEnd(text: string, secrets: readonly string[]): number {
  let longest = 0;
  for (const secret of secrets) {
    for (let n = Math.min(secret.length - 1, text.length); n > longest; n--) {
      if (text.endsWith(secret.slice(0, n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

/** An attempt's frames (from index 0) as the decider takes what was streamed: joined, with their count. */
export function streamedOf(frames: readonly DeltaFrame[]): Streamed | undefined {
  const first = frames[0];
  if (!first) return undefined;
  return {
    itemId: first.item_id,
    attempt: first.attempt,
    text: frames.map((f) => f.text).join(''),
    deltas: frames.length,
  };
}
