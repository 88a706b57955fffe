// Rows (h): cold start: create → awaiting_user_input with a local runtime. Not measured yet.
import type { BenchContext, Measured } from './benchContext.ts';

export async function measureColdStart(_ctx: BenchContext, _forceProfile: boolean): Promise<Measured> {
  return { rows: [], profiles: [] };
}
