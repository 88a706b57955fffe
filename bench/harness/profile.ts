// The CPU profiles a scenario's processes wrote (node's own `--cpu-prof`, see
// Proc), each summarised as its heaviest functions by self time. Any tool that
// reads .cpuprofile files (Chrome DevTools, speedscope) shows the rest.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fmt } from './measure.ts';

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  samples: number[];
  timeDeltas: number[];
}

const SHOWN = 15;

/** Where a function lives, short: `src/server/wsGateway.js:117`, `ws/lib/sender.js:80`, `(garbage collector)`. */
function where(f: CpuProfile['nodes'][number]['callFrame']): string {
  const url = f.url.replace(/^file:\/\//, '');
  const short = url.includes('node_modules/')
    ? url.slice(url.lastIndexOf('node_modules/') + 13)
    : url.replace(/^.*?(dist-bench\/|\/work\/[^/]+\/)/, '');
  return `${f.functionName || '(anonymous)'}${short ? ` ${short}:${f.lineNumber + 1}` : ''}`;
}

/** Markdown sections, one per profile in `dir`. */
export function summariseProfiles(scenario: string, dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .flatMap((file) => {
      const p = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
      const byId = new Map(p.nodes.map((n) => [n.id, n]));
      const self = new Map<string, number>();
      let total = 0;
      p.samples.forEach((id, i) => {
        const ms = (p.timeDeltas[i] ?? 0) / 1000;
        total += ms;
        const key = where(byId.get(id)!.callFrame);
        self.set(key, (self.get(key) ?? 0) + ms);
      });
      const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, SHOWN);
      return [
        `### ${scenario}: \`${join(dir, file)}\``,
        '',
        `${fmt.int(total)} ms of samples; the ${SHOWN} heaviest functions by self time:`,
        '',
        '| Function | Self |',
        '|---|---:|',
        ...top.map(([k, ms]) => `| \`${k}\` | ${fmt.ms(ms)} ms (${((ms / total) * 100).toFixed(1)}%) |`),
        '',
      ];
    });
}
