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

/**
 * The shell of a conversation's runtime that server `serverPid` started in
 * `workspace`: a bash working there that descends from the server (its child,
 * or in a bwrap sandbox the child of bwrap's init), not its lifeline watcher
 * (a bash child of the shell, or outside a sandbox of bwrap).
 */
export function runtimeShellIn(workspace: string, serverPid: number): Proc | undefined {
  const all = processes();
  const byPid = new Map(all.map((p) => [p.pid, p]));
  const descends = (p: Proc) => {
    for (let up = byPid.get(p.ppid), hops = 0; up && hops < 3; up = byPid.get(up.ppid), hops++) {
      if (up.pid === serverPid) return true;
      if (up.comm !== 'bwrap') return false;
    }
    return p.ppid === serverPid;
  };
  const watcher = (p: Proc) => {
    try {
      return readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').split('\0').includes('tether-lifeline');
    } catch {
      return true; // gone
    }
  };
  return all.find(
    (p) => p.comm === 'bash' && p.cwd === workspace && (p.ppid === serverPid || descends(p)) && !watcher(p),
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

/**
 * The pid, as this machine sees it, of the process that is `nsPid` in its own
 * pid namespace (a sandbox's `$$` or `$!`) among those `where` picks (a group,
 * a working directory: pids repeat across sandboxes); outside a sandbox the
 * two pids are the same. Undefined when there is none.
 */
export function hostPidOf(nsPid: number, where: (p: Proc) => boolean): number | undefined {
  for (const p of processes()) {
    if (!where(p)) continue;
    try {
      const line = /^NSpid:\s*(.*)$/m.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))?.[1] ?? '';
      if (Number(line.trim().split(/\s+/).at(-1)) === nsPid) return p.pid;
    } catch {
      // Gone meanwhile.
    }
  }
  return undefined;
}
