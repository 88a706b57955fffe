import type { NatsConnection } from '../src/store/index.ts';

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
