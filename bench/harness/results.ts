// bench/RESULTS.md, generated whole: the summary table, then each scenario's
// method, per-run figures and notes, then the profiles taken.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fmt } from './measure.ts';
import type { Row, Scenario, Target } from './scenario.ts';

export type Measured = { scenario: Scenario; rows: Row[]; log: string[]; notes: string[]; seconds: number };
export type Report = {
  command: string;
  seconds: number;
  natsServer: string;
  code: string;
  measured: Measured[];
  profiles: string[];
};

export const ratioOf = (r: Row) => r.ratio ?? r.tether.value / r.baseline.value;

function bound(t: Target, r: Row): string {
  const unit = t.of === 'tether' && r.tether.unit ? ` ${r.tether.unit}` : '';
  return `${t.op} ${t.value}${unit}${t.say ? ` ${t.say}` : ''}`;
}

export function verdict(r: Row): boolean | undefined {
  if (!r.target) return undefined;
  const v = r.target.of === 'tether' ? r.tether.value : ratioOf(r);
  const b = r.target.value;
  return { '≥': v >= b, '≤': v <= b, '<': v < b, '>': v > b }[r.target.op];
}

const show = (f: Row['tether']) => f.text ?? `${fmt.ms(f.value)}${f.unit ? ` ${f.unit}` : ''}`;

export function table(rows: readonly Row[]): string[] {
  return [
    '| (id) | what | Tether | baseline | ratio | target | verdict |',
    '|---|---|---:|---:|---:|---|---|',
    ...rows.map((r) => {
      const v = verdict(r);
      const target = r.target ? bound(r.target, r) : '—';
      return `| (${r.id}) | ${r.what} | ${show(r.tether)} | ${show(r.baseline)} | ${fmt.ratio(ratioOf(r))} | ${target} | ${v === undefined ? '—' : v ? 'pass' : '**MISS**'} |`;
    }),
  ];
}

export function machine(natsServer: string): string {
  const model = /model name\s*:\s*(.*)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpus()[0]?.model;
  return `${model}, ${cpus().length} cores; node ${process.version}; ${natsServer}`;
}

export function codeVersion(): string {
  try {
    const git = (...a: string[]) => execFileSync('git', a, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const dirty = git('status', '--porcelain', '--', 'src', 'machines', 'bench').split('\n').filter(Boolean).length;
    return `commit ${git('rev-parse', '--short', 'HEAD').trim()}${dirty ? ` plus ${dirty} uncommitted file(s)` : ', clean'}`;
  } catch {
    return 'unknown (not a git checkout)';
  }
}

export function render(r: Report): string {
  const sections = r.measured.flatMap((m) => [
    `## ${m.scenario.name}: ${m.rows.map((row) => `(${row.id})`).join(' ')} (${m.seconds.toFixed(0)} s)`,
    '',
    `- Set-up: ${m.scenario.setup}`,
    `- Load: ${m.scenario.load}`,
    `- Baseline: ${m.scenario.baseline}`,
    `- Checks: ${m.scenario.checks}`,
    `- \`--quick\`: ${m.scenario.quick}`,
    '',
    ...m.log.map((l) => `- ${l}`),
    ...(m.notes.length ? ['', ...m.notes.map((n) => `- ${n}`)] : []),
    '',
  ]);
  return [
    '# Tether benchmarks',
    '',
    'Generated whole by `npm run bench` (bench/run.ts); do not edit by hand, run it again. The method is in bench/README.md.',
    '',
    ...table(r.measured.flatMap((m) => m.rows)),
    '',
    `- Date: ${new Date().toISOString()}; command: \`${r.command}\` (${r.seconds.toFixed(0)} s)`,
    `- Code: ${r.code}`,
    `- Machine: ${machine(r.natsServer)}`,
    '',
    ...sections,
    ...(r.profiles.length ? ['## Profiles', '', ...r.profiles, ''] : []),
  ].join('\n');
}
