import type { Deadline } from '../../machines/index.ts';

/**
 * Arms one timer for the deadline a session's context holds. Deadlines are
 * data (they survive snapshots); this only turns the current one into a
 * wake-up. Re-arming with the same deadline keeps the running timer.
 */
export class DeadlineTimer {
  readonly #clock: () => Date;
  readonly #fire: (deadline: Deadline) => void;
  #armed: Deadline | null = null;
  #timer: NodeJS.Timeout | null = null;

  constructor(clock: () => Date, fire: (deadline: Deadline) => void) {
    this.#clock = clock;
    this.#fire = fire;
  }

  arm(deadline: Deadline | null): void {
    if (deadline?.name === this.#armed?.name && deadline?.at === this.#armed?.at) return;
    this.clear();
    if (!deadline) return;
    this.#armed = deadline;
    this.#schedule(deadline);
  }

  #schedule(deadline: Deadline): void {
    const delay = deadline.at - this.#clock().getTime();
    this.#timer = setTimeout(
      () => {
        this.#timer = null;
        // Timers may wake a little early against the wall clock: the machine only
        // accepts the deadline's event stamped at or after it.
        if (deadline.at > this.#clock().getTime()) this.#schedule(deadline);
        else this.#fire(deadline);
      },
      Math.min(Math.max(0, delay), 2 ** 31 - 1),
    );
    this.#timer.unref();
  }

  clear(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#armed = null;
  }
}
