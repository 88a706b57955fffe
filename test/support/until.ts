/** Polls `check` every 10 ms until it holds; rejects naming `what` after `ms`. */
export async function until(check: () => Promise<boolean> | boolean, what = 'a condition', ms = 5_000): Promise<void> {
  const end = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
