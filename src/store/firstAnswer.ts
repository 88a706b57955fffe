/** When the attempts of `firstAnswer` start and how long each waits. */
export interface AttemptSchedule {
  /**
   * A new attempt starts this long after the one before, or as soon as none is
   * waiting; a list gives attempt n+1's wait after attempt n, its last entry
   * every wait after.
   */
  everyMs: number | readonly number[];
  /** How long attempt n waits for its answer; the last entry for every attempt after. */
  timeoutsMs: readonly number[];
  /** Attempts in all. */
  attempts: number;
}

export interface FirstAnswerOptions<T> {
  /** Whether a failure means the attempt got no answer: then the others go on. Any other failure is the answer. */
  lost: (err: unknown) => boolean;
  /** Gets what an attempt brought after the answer was given (a lookup that made something, say). */
  drop: (late: T) => void;
  /** Asked before each attempt after the first: once true, none starts, and those waiting decide. */
  cancelled?: () => boolean;
}

/**
 * The first answer of attempts that overlap: a new one starts every `everyMs`
 * while those before it keep waiting, each up to its own timeout. An attempt
 * whose request was lost then holds no later one back, and a slow answer is
 * still taken. When every attempt was lost, the last loss is the answer.
 */
export async function firstAnswer<T>(
  attempt: (timeoutMs: number) => Promise<T>,
  schedule: AttemptSchedule,
  options: FirstAnswerOptions<T>,
): Promise<T> {
  const outcome = await new Promise<{ value: T } | { error: unknown }>((settle) => {
    let started = 0;
    let waiting = 0;
    let lastLoss: unknown;
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (result: { value: T } | { error: unknown }) => {
      done = true;
      clearTimeout(timer);
      settle(result);
    };
    const next = (): void => {
      clearTimeout(timer);
      if (done) return;
      if (started >= schedule.attempts || (started > 0 && options.cancelled?.() === true)) {
        if (waiting === 0) finish({ error: lastLoss });
        return;
      }
      const timeouts = schedule.timeoutsMs;
      const timeoutMs = timeouts[Math.min(started, timeouts.length - 1)]!;
      started += 1;
      waiting += 1;
      // A throw is a failure like a rejection.
      new Promise<T>((answer) => answer(attempt(timeoutMs))).then(
        (value) => {
          if (done) options.drop(value);
          else finish({ value });
        },
        (err: unknown) => {
          waiting -= 1;
          if (done) return;
          if (!options.lost(err)) return finish({ error: err });
          lastLoss = err;
          if (waiting === 0) next();
        },
      );
      const every = schedule.everyMs;
      timer = setTimeout(next, typeof every === 'number' ? every : every[Math.min(started - 1, every.length - 1)]!);
    };
    next();
  });
  if ('error' in outcome) throw outcome.error;
  return outcome.value;
}
