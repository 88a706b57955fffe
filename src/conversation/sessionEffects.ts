import { effectKey, effectsOf, type Deadline, type SessionSnapshot } from '../../machines/index.ts';
import type { DeltaFrame } from '../../protocol/index.ts';
import { DeadlineTimer } from './deadlineTimer.ts';
import { EffectRunner, type EffectDeps, type EffectHost } from './effectRunner.ts';

/**
 * Turns what a session's state asks for into running effects, in one place,
 * the same way after a live step and after a fold: each (effect, cause) starts
 * once and runs to its end; the state's deadline is armed as one timer.
 */
export class SessionEffects {
  readonly #runner: EffectRunner;
  readonly #deadline: DeadlineTimer;
  /** Effects started and not finished, by `effectKey`. */
  readonly #running = new Set<string>();

  constructor(host: EffectHost, deps: EffectDeps, deadlinePassed: (deadline: Deadline) => void) {
    this.#runner = new EffectRunner(host, deps);
    this.#deadline = new DeadlineTimer(deps.clock, deadlinePassed);
  }

  /** Starts what `snapshot` asks for and is not running yet; arms its deadline (or none). */
  follow(snapshot: SessionSnapshot): void {
    let deadline: Deadline | null = null;
    for (const effect of effectsOf(snapshot)) {
      if (effect.type === 'wake_at') {
        deadline = effect.deadline;
        continue;
      }
      const key = effectKey(effect);
      if (this.#running.has(key)) continue;
      this.#running.add(key);
      void this.#runner.run(effect).finally(() => this.#running.delete(key));
    }
    this.#deadline.arm(deadline);
  }

  /** The current agent step attempt's deltas from index 0, or null. */
  currentDeltas(): readonly DeltaFrame[] | null {
    return this.#runner.currentDeltas();
  }

  /** No more wake-ups. */
  clearDeadline(): void {
    this.#deadline.clear();
  }

  /** Stops every effect and the runtime. */
  stop(why: string): Promise<void> {
    this.#deadline.clear();
    return this.#runner.stop(why);
  }
}
