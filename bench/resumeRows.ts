// Rows (f): resume after a drop and across a restart, against Socket.IO connection state recovery. Not measured yet.
import type { BenchContext, Measured } from './benchContext.ts';

export async function measureResume(_ctx: BenchContext, _forceProfile: boolean): Promise<Measured> {
  return { rows: [], profiles: [] };
}
