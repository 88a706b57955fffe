import { effectKey, effectsOf, type Deadline, type Effect, type SessionSnapshot } from '../../machines/index.ts';
import type { DeltaFrame } from '../../protocol/index.ts';
import { DeadlineTimer } from './deadlineTimer.ts';
import type { DeltaStream } from './deltaStream.ts';
import { EffectRunner, type EffectDeps, type EffectHost } from './effectRunner.ts';

/** Why an effect was aborted: the session's state no longer asks for it. */
export class EffectCutError extends Error {
  constructor(key: string) {
    super(`${key} is no longer asked for by the state`);
    this.name = 'AbortError';
  }
}

/** The effects a state stops asking for are cut: an agent step (its LLM request) and a command (its process group). */
const CUT_WHEN_NOT_ASKED: ReadonlySet<Effect['type']> = new Set(['ask_agent', 'run_command', 'call_tool']);

/**
 * Turns what a session's state asks for into running effects, in one place,
 * the same way after a live step and after a fold: each (effect, cause) starts
 * once and runs to its end, unless it is an agent step or a command that the
 * state no longer asks for (an interrupt, a stop, an error): that one is
 * aborted. The state's deadline is armed as one timer.
 */
export class SessionEffects {
  readonly #runner: EffectRunner;
  readonly #deadline: DeadlineTimer;
  /** Effects started and not finished, by `effectKey`, with what aborts each. */
  readonly #running = new Map<string, { type: Effect['type']; abort: AbortController }>();
  /** The deltas held while a decision that cuts their attempt is being stored. */
  #held: DeltaStream | null = null;

  constructor(host: EffectHost, deps: EffectDeps, deadlinePassed: (deadline: Deadline) => void) {
    this.#runner = new EffectRunner(host, deps);
    this.#deadline = new DeadlineTimer(deps.clock, deadlinePassed);
  }

  /** Starts what `snapshot` asks for and is not running yet; arms its deadline (or none). */
  follow(snapshot: SessionSnapshot): void {
    let deadline: Deadline | null = null;
    const asked = new Set<string>();
    for (const effect of effectsOf(snapshot)) {
      if (effect.type === 'wake_at') {
        deadline = effect.deadline;
        continue;
      }
      const key = effectKey(effect);
      asked.add(key);
      if (this.#running.has(key)) continue;
      const abort = new AbortController();
      this.#running.set(key, { type: effect.type, abort });
      void this.#runner.run(effect, abort.signal).finally(() => this.#running.delete(key));
    }
    for (const [key, { type, abort }] of this.#running) {
      if (!asked.has(key) && CUT_WHEN_NOT_ASKED.has(type)) abort.abort(new EffectCutError(key));
    }
    this.#deadline.arm(deadline);
  }

  /**
   * Called with a decided state before its events are appended: the deltas of
   * an attempt it no longer waits for (cut by an interrupt or a stop) are held,
   * then dropped once the decision is stored (`stored(true)`), so no delta goes
   * out past what the decision stored of it; sent after all if it stored
   * nothing (a duplicate).
   */
  decided(snapshot: SessionSnapshot): void {
    const thinking = snapshot.matches({ active: { running: 'thinking' } });
    const { stepCause, attempt } = snapshot.context;
    this.#held?.release();
    this.#held = this.#runner.holdDeltasUnless(thinking ? stepCause : null, attempt);
  }

  /** The decision given to `decided` was stored, or not (a duplicate). */
  stored(stored: boolean): void {
    const held = this.#held;
    this.#held = null;
    if (stored) held?.close();
    else held?.release();
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
