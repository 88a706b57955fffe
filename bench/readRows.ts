// Row (b): one conversation's whole log through `log.read` against a raw ordered consumer.
import type { BenchContext } from './benchContext.ts';
import { READ_BUCKETS } from './buckets.ts';
import { busyMachine, cpuMeter, fmt, median, noiseNote, repeat } from './measure.ts';
import { profileSection } from './profile.ts';
import { rawRead, readFixture, tetherRead } from './readBench.ts';
import type { ProfileSection, Row } from './report.ts';

const READ_TARGET = 1.5;
const EVENTS = 10_000;

export async function measureRead(
  ctx: BenchContext,
  forceProfile: boolean,
): Promise<{ rows: Row[]; profiles: ProfileSection[] }> {
  const reps = ctx.quick ? { warmups: 1, runs: 3 } : { warmups: 2, runs: 9 };
  const fixture = await readFixture(ctx.rawNc, EVENTS, `${ctx.runId}`, ctx.stepTimeoutMs);
  let ratio: number;
  let row: Row;
  try {
    const { kept: results, discarded } = await repeat(
      'read',
      reps,
      async (i) => {
        const cpu = cpuMeter(ctx.natsPid);
        // Alternate who goes first, so neither always reads a cold or a warm server.
        const raw1 = i % 2 === 0 ? undefined : await rawRead(fixture, ctx.stepTimeoutMs);
        const tether = await tetherRead(fixture, ctx.stepTimeoutMs);
        const raw = raw1 ?? (await rawRead(fixture, ctx.stepTimeoutMs));
        return {
          tether,
          raw,
          cpu: cpu(),
          summary: `Tether log.read ${tether.summary}; raw ordered consumer ${raw.summary}`,
        };
      },
      (r) => busyMachine(r.cpu),
    );
    ctx.notes.push(
      noiseNote('read', results.length, discarded.length, results.filter((r) => busyMachine(r.cpu)).length),
    );
    results.forEach((r, i) =>
      ctx.runs.push(
        `read run ${i + 1}: Tether log.read ${fmt.ms(r.tether.ms)} ms; raw ordered consumer ${fmt.ms(r.raw.ms)} ms`,
      ),
    );
    const tether = median(results.map((r) => r.tether.ms));
    const raw = median(results.map((r) => r.raw.ms));
    ratio = tether / raw;
    if (ratio > READ_TARGET) {
      ctx.notes.push(
        `**Read target missed**: ratio ${fmt.ratio(ratio)} against ≤ ${READ_TARGET}; Tether needs ≤ ${fmt.ms(raw * READ_TARGET)} ms. See the read profile below.`,
      );
    }
    row = {
      measurement: `(b) read: ${fmt.int(EVENTS)} events of one conversation, \`log.read\` vs raw ordered consumer (pulls bounded to 8 MiB) + JSON.parse`,
      tether: `${fmt.ms(tether)} ms`,
      baseline: `${fmt.ms(raw)} ms`,
      ratio,
      target: `≤ ${READ_TARGET}`,
      pass: ratio <= READ_TARGET,
    };
  } finally {
    await fixture.drop();
  }
  const profiles: ProfileSection[] = [];
  if (forceProfile || ratio > READ_TARGET) {
    const again = await readFixture(ctx.rawNc, EVENTS, `${ctx.runId}_profile`, ctx.stepTimeoutMs);
    try {
      profiles.push(
        await profileSection(
          ctx.runId,
          'Read',
          `Five \`log.read\` calls of ${fmt.int(EVENTS)} events under the CPU profiler.`,
          READ_BUCKETS,
          (around) =>
            around(async () => {
              for (let i = 0; i < 5; i++) await tetherRead(again, ctx.stepTimeoutMs);
            }),
        ),
      );
    } finally {
      await again.drop();
    }
  }
  ctx.settings.push(
    `Read (b): ${fmt.int(EVENTS)} stored events of one conversation (plus as many of another conversation in the same stream); \`log.read(id)\` against \`js.consumers.get(stream, { filter_subjects: subject })\` + \`consume({ max_messages: 1000 })\` until nothing is pending, \`JSON.parse\` of each; ${reps.warmups} warm-up + ${reps.runs} measured runs (order alternating), median, busy runs run again as above.`,
  );
  return { rows: [row], profiles };
}
