/**
 * Seeds of the property tests. Each property runs
 * - on its regression seeds: seeds that once found a bug, with as many runs as
 *   when they found it, every time (fixed cases: CI reruns exactly them);
 * - on one fresh seed, random on every run of the suite, so each run also
 *   tries cases never tried before. The seed is in the test's name and logged.
 *
 * A failure prints fast-check's `{ seed, path }`. To reproduce it:
 *
 *     TETHER_PROPERTY_SEED=<seed> npx vitest run test/properties
 *
 * runs every property's fresh case with that seed instead of a random one;
 * add `TETHER_PROPERTY_PATH=<path>` to replay just the failing (shrunk) case.
 * Once the bug is fixed, keep what found it: the shrunk counterexample as one
 * of the property's `examples` (one run, exact), or the seed in its list below
 * with the number of runs it failed within.
 *
 * The fresh runs are fewer than the regression runs, so the suite takes about
 * as long as when it ran the fixed seeds alone, while every run explores anew.
 */
export const REGRESSION_SEEDS = {
  machine: [{ seed: 20260101, numRuns: 100 }],
  live: [{ seed: 20260102, numRuns: 100 }],
  passivation: [{ seed: 20260103, numRuns: 50 }],
  race: [{ seed: 20260104, numRuns: 100 }],
  decider: [{ seed: 20261124, numRuns: 100 }],
} as const;

export type PropertyName = keyof typeof REGRESSION_SEEDS;

/** The fresh seed of this run of the suite: TETHER_PROPERTY_SEED when set, else random. */
const FRESH_SEED = seedFromEnv() ?? Math.floor(Math.random() * 0x7fff_ffff);
const FRESH_PATH = process.env.TETHER_PROPERTY_PATH || undefined;

function seedFromEnv(): number | undefined {
  const text = process.env.TETHER_PROPERTY_SEED;
  if (text === undefined || text === '') return undefined;
  const seed = Number(text);
  if (!Number.isInteger(seed)) throw new Error(`TETHER_PROPERTY_SEED must be an integer, not ${JSON.stringify(text)}`);
  return seed;
}

export interface SeededRun {
  /** For `fc.assert`; the test's name shows `params.seed`. */
  params: { seed: number; numRuns: number; path?: string };
  /** A fixed regression case (the same runs every time), not the fresh one. */
  regression: boolean;
}

/**
 * The runs of one property: its regression seeds, then the fresh seed with
 * `freshRuns` runs. Logs the fresh seed and how to rerun it.
 */
export function seededRuns(property: PropertyName, freshRuns: number): SeededRun[] {
  console.log(`property ${property}: fresh seed ${FRESH_SEED} (rerun: TETHER_PROPERTY_SEED=${FRESH_SEED})`);
  const path = FRESH_PATH === undefined ? {} : { path: FRESH_PATH };
  return [
    ...REGRESSION_SEEDS[property].map(({ seed, numRuns }) => ({ params: { seed, numRuns }, regression: true })),
    { params: { seed: FRESH_SEED, numRuns: freshRuns, ...path }, regression: false },
  ];
}
