import type { NatsConnection } from '../src/store/index.ts';
import type { ProfileSection, Row } from './report.ts';

/** What every measurement gets from run.ts, and where it leaves its lines for RESULTS.md. */
export interface BenchContext {
  quick: boolean;
  /** Tether's NATS connection, and the baselines' own (as separate programs would have). */
  nc: NatsConnection;
  rawNc: NatsConnection;
  natsUrl: string;
  natsPid: number;
  /** Makes stream and bucket names unique to this run. */
  runId: string;
  /** Bound on each step; a step that takes longer fails the run. */
  stepTimeoutMs: number;
  settings: string[];
  notes: string[];
  runs: string[];
}

/** One step of the run: its rows for the table, and the profiles of its missed targets. */
export interface Measured {
  rows: Row[];
  profiles: ProfileSection[];
}

/** A step of `npm run bench` (bench/run.ts lists them in order; `--only=name,...` picks some). */
export type Measure = (ctx: BenchContext, forceProfile: boolean) => Promise<Measured>;
