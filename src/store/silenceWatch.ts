/**
 * How often a watch looks, and how many looks in a row with nothing brought
 * make it give up on the pull: two, so that an event loop blocked past one
 * look is not taken for silence.
 */
const CHECK_MS = 250;
const SILENT_CHECKS = 2;

/** What a watch reads of the follow it watches: where it is, and the pull of the moment. */
export interface Watched {
  /** The sequence the follow brings next: it moves with every event brought. */
  next(): number;
  /** The pull under way, if any: silence counts for one pull only. */
  pull(): object | undefined;
}

/**
 * Tells a follow that its pull went silent while an event it was told is
 * stored is due: the consumer of a replicated stream lives on one of the
 * stream's servers, not necessarily the one this node is connected to, and
 * one that stopped says nothing to this connection; two missed heartbeats
 * (2-3 s) would tell, this tells in 0.5-0.75 s. Once per expectation: an
 * expected event that never comes (purged first) costs one new consumer, not
 * one every half second; a later event expected arms the watch again.
 */
export class SilenceWatch {
  readonly #watched: Watched;
  readonly #silent: () => void;
  /** The highest sequence the follow was told is stored (0: none). */
  #expected = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  #nextAtCheck = 0;
  #pullAtCheck: object | undefined;
  #silentChecks = 0;

  constructor(watched: Watched, silent: () => void) {
    this.#watched = watched;
    this.#silent = silent;
  }

  expect(seq: number): void {
    if (seq < this.#watched.next() || seq <= this.#expected) return;
    this.#expected = seq;
    if (this.#timer) return;
    this.#nextAtCheck = this.#watched.next();
    this.#pullAtCheck = this.#watched.pull();
    this.#silentChecks = 0;
    this.#timer = setInterval(() => this.#check(), CHECK_MS);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#pullAtCheck = undefined;
  }

  #check(): void {
    const [next, pull] = [this.#watched.next(), this.#watched.pull()];
    if (next > this.#expected) return this.stop();
    // A new pull (after a reconnect, an election) starts from no silence; without one there is none to judge.
    if (next !== this.#nextAtCheck || pull !== this.#pullAtCheck || !pull) {
      this.#nextAtCheck = next;
      this.#pullAtCheck = pull;
      this.#silentChecks = 0;
    } else if (++this.#silentChecks >= SILENT_CHECKS) {
      this.stop();
      this.#silent();
    }
  }
}
