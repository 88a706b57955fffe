// Rows (g): density: 10,000 conversations with one ws connection each, against a bare ws server. Not measured yet.
import type { BenchContext, Measured } from './benchContext.ts';

export async function measureDensity(_ctx: BenchContext, _forceProfile: boolean): Promise<Measured> {
  return { rows: [], profiles: [] };
}
