// Percentiles of the latency runs' per-message figures.

/** The p-th percentile (0 < p ≤ 100) by nearest rank: a value that was measured, never interpolated. */
export function percentile(values: ArrayLike<number>, p: number): number {
  if (values.length === 0) throw new RangeError('percentile of nothing');
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export interface LatencySummary {
  p50: number;
  p99: number;
  max: number;
  /** How late the sender was against its schedule, p99 (already inside the latencies). */
  sendLagP99: number;
}

export function summariseLatency(latencies: ArrayLike<number>, sendLags: ArrayLike<number>): LatencySummary {
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: percentile(latencies, 100),
    sendLagP99: percentile(sendLags, 99),
  };
}
