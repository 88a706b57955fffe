import { describe, expect, test } from 'vitest';
import { firstAnswer, type AttemptSchedule } from '../../src/store/firstAnswer.ts';
import { sleep } from '../support/faults.ts';
import { until } from '../support/until.ts';

/** A request that got no answer in its time. */
class Lost extends Error {
  constructor(readonly attempt: number) {
    super(`attempt ${attempt} lost`);
  }
}

/** Attempts the test answers by hand, in the order they started. */
function attempts() {
  const started: Array<{ timeoutMs: number; answer: (value: string) => void; fail: (err: unknown) => void }> = [];
  const attempt = (timeoutMs: number) =>
    new Promise<string>((answer, fail) => {
      started.push({ timeoutMs, answer, fail });
    });
  return { started, attempt };
}

const SCHEDULE = { everyMs: 10, timeoutsMs: [100, 200, 400], attempts: 5 } satisfies AttemptSchedule;
const lost = (err: unknown) => err instanceof Lost;

describe('firstAnswer', () => {
  test('an attempt that gets no answer holds no later one back: the next starts while it waits, and is taken', async () => {
    const { started, attempt } = attempts();
    const answer = firstAnswer(attempt, SCHEDULE, { lost, drop: () => undefined });
    await until(() => started.length === 2, 'a second attempt');
    started[1]!.answer('second');
    expect(await answer).toBe('second');
    // Each waits longer than the one before, up to the last timeout given.
    expect(started.map((a) => a.timeoutMs).slice(0, 2)).toEqual([100, 200]);
    started[0]!.fail(new Lost(0));
  });

  test('what an attempt brings after the answer was given is dropped', async () => {
    const { started, attempt } = attempts();
    const dropped: string[] = [];
    const answer = firstAnswer(attempt, SCHEDULE, { lost, drop: (late) => dropped.push(late) });
    await until(() => started.length === 2, 'a second attempt');
    started[1]!.answer('fast');
    expect(await answer).toBe('fast');
    started[0]!.answer('slow');
    await until(() => dropped.length === 1, 'the late answer dropped');
    expect(dropped).toEqual(['slow']);
  });

  test('a failure other than a lost request is the answer at once, and no attempt starts after it', async () => {
    const { started, attempt } = attempts();
    const answer = firstAnswer(attempt, SCHEDULE, { lost, drop: () => undefined });
    const refused = new Error('stream not found');
    started[0]!.fail(refused);
    await expect(answer).rejects.toBe(refused);
    await sleep(5 * SCHEDULE.everyMs);
    expect(started).toHaveLength(1);
  });

  test('when every attempt was lost, the last loss is the answer, after the attempts scheduled', async () => {
    const timeouts: number[] = [];
    const answer = firstAnswer(
      async (timeoutMs) => {
        timeouts.push(timeoutMs);
        throw new Lost(timeouts.length - 1);
      },
      // A lost attempt with none other waiting: the next starts at once, not a minute later.
      { everyMs: 60_000, timeoutsMs: [1, 2], attempts: 3 },
      { lost, drop: () => undefined },
    );
    await expect(answer).rejects.toEqual(new Lost(2));
    expect(timeouts).toEqual([1, 2, 2]);
  });

  test('a list of waits spaces the attempts one by one, its last entry for every one after', async () => {
    const { started, attempt } = attempts();
    const at: number[] = [];
    const t0 = performance.now();
    const timed = (timeoutMs: number) => (at.push(performance.now() - t0), attempt(timeoutMs));
    const answer = firstAnswer(
      timed,
      { everyMs: [20, 200], timeoutsMs: [10_000], attempts: 4 },
      { lost, drop: () => undefined },
    );
    await until(() => started.length === 3, 'a third attempt');
    await sleep(100);
    // The second 20 ms after the first, the third 200 ms after it, the fourth not yet.
    expect(started).toHaveLength(3);
    expect(at[1]! - at[0]!).toBeLessThan(150);
    expect(at[2]! - at[1]!).toBeGreaterThanOrEqual(190);
    started[2]!.answer('third');
    expect(await answer).toBe('third');
    for (const [i, a] of started.entries()) if (i !== 2) a.fail(new Lost(i));
  });

  test('once cancelled, no attempt starts, and the ones waiting decide', async () => {
    const { started, attempt } = attempts();
    let cancelled = false;
    const answer = firstAnswer(attempt, SCHEDULE, { lost, drop: () => undefined, cancelled: () => cancelled });
    cancelled = true;
    await sleep(5 * SCHEDULE.everyMs);
    expect(started).toHaveLength(1);
    started[0]!.fail(new Lost(0));
    await expect(answer).rejects.toEqual(new Lost(0));
  });
});
