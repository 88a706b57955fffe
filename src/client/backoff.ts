/** How the client waits before it reconnects after a drop. */
export interface Backoff {
  /** Wait before the first attempt after a drop, in ms (default 250). */
  initialMs?: number;
  /** Longest wait between two attempts, in ms (default 5,000). */
  maxMs?: number;
}

/**
 * The wait before reconnection attempt `attempt` (0 for the first after a
 * drop): doubling from `initialMs` up to `maxMs`, each drawn between half and
 * all of that, so that many clients dropped at once do not come back at once.
 */
export function backoffDelay(attempt: number, { initialMs = 250, maxMs = 5_000 }: Backoff = {}): number {
  const ceiling = Math.min(initialMs * 2 ** Math.min(attempt, 20), maxMs);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}
