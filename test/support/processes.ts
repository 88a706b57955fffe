import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

export interface Proc {
  pid: number;
  ppid: number;
  /** Its process group id. */
  pgrp: number;
  /** Its one-letter state (R, S, T, Z, ...). */
  state: string;
  comm: string;
  /** Its working directory, when it can be read. */
  cwd: string | undefined;
}

/** Every process on this machine, from /proc (one that goes away while it is read is left out). */
export function processes(): Proc[] {
  const found: Proc[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      let cwd: string | undefined;
      try {
        cwd = readlinkSync(`/proc/${entry}/cwd`);
      } catch {
        cwd = undefined;
      }
      found.push({
        pid: Number(entry),
        ppid: Number(fields[1]),
        pgrp: Number(fields[2]),
        state: fields[0] ?? '?',
        comm,
        cwd,
      });
    } catch {
      // The process went away while we looked.
    }
  }
  return found;
}

/** The bash processes working in this workspace (a conversation's runtime is one), optionally only children of `parent`. */
export function bashesIn(workspace: string, parent?: number): Proc[] {
  return processes().filter(
    (p) => p.comm === 'bash' && p.cwd === workspace && (parent === undefined || p.ppid === parent),
  );
}

/** The processes of a process group that still run: a zombie has exited, it only waits to be reaped. */
export function runningInGroup(pgrp: number): Proc[] {
  return processes().filter((p) => p.pgrp === pgrp && p.state !== 'Z' && p.state !== 'X');
}

/** Alive and not a zombie (a container's init may never reap the orphans). */
export function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}
