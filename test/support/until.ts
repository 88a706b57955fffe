export interface UntilOptions {
  /** How long to keep checking before giving up (default 5 s). */
  timeoutMs?: number;
  /** The pause between two checks (default 10 ms). */
  everyMs?: number;
  /** A check that throws counts as "not yet" (the last error is named on timeout); else a throw ends the wait. */
  retryErrors?: boolean;
}

/**
 * How a test waits on a server (a process asked over HTTP, a nats-server): every 50 ms, for up
 * to 30 s, a request that fails counting as "not yet". `until(check, what, SERVER_WAIT)`.
 */
export const SERVER_WAIT = { timeoutMs: 30_000, everyMs: 50, retryErrors: true } satisfies UntilOptions;

/**
 * Checks `check` until it gives a value other than `undefined` or `false`, and resolves
 * with that value (`true` for a yes-or-no check). Rejects after the timeout with a message
 * that names `what` (a function is asked for it then, for a message that says what was left).
 */
export async function until<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  what: string | (() => string) = 'a condition',
  options: UntilOptions = {},
): Promise<T> {
  const { timeoutMs = 5_000, everyMs = 10, retryErrors = false } = options;
  const end = performance.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      if (!retryErrors) throw err;
      lastError = err;
    }
    if (performance.now() > end) {
      const named = typeof what === 'string' ? what : what();
      const error = lastError instanceof Error ? lastError.message : lastError ? JSON.stringify(lastError) : undefined;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${named}${error ? `: ${error}` : ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
