// What a scenario declares (what it sets up, the load, the baseline, the
// checks, its rows and targets) and what the harness gives it to run with.
import type { NatsConnection } from '../../src/store/index.ts';
import { busy, describeUse, fmt, progress, type Timed } from './measure.ts';

/** A figure and how it reads in the table (`17,198 events/s`; by default the value and its unit). */
export type Figure = { value: number; text?: string; unit?: string };

/** A bound on the ratio (default) or on Tether's own figure, with extra words after it (`say`). */
export type Target = { op: '≥' | '≤' | '<' | '>'; value: number; of?: 'ratio' | 'tether'; say?: string };

/** A row of the summary table; `id` `a2` shows as `(a2)`; the ratio is tether ÷ baseline unless given. */
export type Row = { id: string; what: string; tether: Figure; baseline: Figure; ratio?: number; target?: Target };

export type Reps = { warmups: number; runs: number };

export interface Ctx {
  quick: boolean;
  /** `--profile`: hosts write CPU profiles into `profileDir`. */
  profile: boolean;
  natsUrl: string;
  /** The bench's own NATS connection: the baselines' programs use it. */
  nc: NatsConnection;
  /** A name unique to this run and label, for streams, buckets and folders. */
  tag(label: string): string;
  /** Where this run's CPU profiles go. */
  profileDir: string;
  /** A line for the scenario's per-run figures. */
  log(line: string): void;
  /** A short note under the scenario's figures. */
  note(line: string): void;
}

/** A scenario: the method as RESULTS.md prints it (what is built, what is timed and how often, the
 * baseline, what every run verifies, what `--quick` changes), and the run that returns its rows. */
export interface Scenario {
  name: string;
  setup: string;
  load: string;
  baseline: string;
  checks: string;
  quick: string;
  run(ctx: Ctx): Promise<Row[]>;
}

export const reps = (ctx: Ctx, quick: Reps, full: Reps): Reps => (ctx.quick ? quick : full);

/**
 * Runs `once` for the warm-ups, then until `r.runs` runs are kept. A run whose
 * timed phases had other processes busy is run again (at most `r.runs` extra
 * times). Every kept run's summary and process use goes to the figures.
 */
export async function repeat<T extends { summary: string; use: Array<Timed<unknown>> }>(
  ctx: Ctx,
  label: string,
  r: Reps,
  once: (i: number) => Promise<T>,
): Promise<T[]> {
  const kept: T[] = [];
  let redone = 0;
  for (let i = 0; kept.length < r.runs; i++) {
    const result = await once(i);
    const warm = i < r.warmups;
    const noisy = result.use.some(busy);
    // --quick checks that everything runs: no runs again.
    const redo = !ctx.quick && !warm && noisy && redone < r.runs;
    progress(
      `${label} ${warm ? 'warm-up' : `run ${kept.length + 1}/${r.runs}`}: ${result.summary}${redo ? ' [busy machine: again]' : ''}`,
    );
    if (warm) continue;
    if (redo) {
      redone++;
      continue;
    }
    kept.push(result);
    ctx.log(
      `${label} ${kept.length}: ${result.summary}${noisy ? ' **(busy machine)**' : ''}; ${result.use.map(describeUse).join('; ')}`,
    );
  }
  if (redone) ctx.note(`${redone} ${label} run(s) were run again: other processes used over 20% of a core meanwhile.`);
  return kept;
}

/** `17,198 events/s`-style figure. */
export const per = (value: number, unit: string): Figure => ({ value, text: `${fmt.int(value)} ${unit}` });
export const msFigure = (value: number, extra = ''): Figure => ({ value, text: `${fmt.ms(value)} ms${extra}` });
