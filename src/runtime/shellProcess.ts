import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { LIFELINE_NAME } from './lifeline.ts';
import type { CommandResult } from './runtime.ts';

// The process-level helpers of a local runtime's shell.

/** The one-letter state of a process from /proc (R, S, D, T, Z, ...), or undefined when it is gone or unknown. */
export function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return undefined;
  }
}

/** The result of a command that never ran. */
export function notRun(): CommandResult {
  return { exit_code: null, output: '', timed_out: false, truncated: false };
}

/** Signals a shell's whole process group (the command and all it started). */
export function signalGroup(child: ChildProcessWithoutNullStreams | undefined, signal: NodeJS.Signals): void {
  if (child?.pid !== undefined) signalPid(-child.pid, signal);
}

/** Signals a process (or, for a negative pid, a process group) that may be gone already. */
export function signalPid(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // ESRCH: gone.
  }
}

/** Resolves once the child has exited (at once when it has). */
export function exitOf(child: ChildProcessWithoutNullStreams): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/**
 * The last process id the kernel gave out in this pid namespace, or undefined
 * when it cannot be read: a command's processes get ids after the value read
 * just before it started.
 */
export function lastPid(): number | undefined {
  try {
    const value = Number(readFileSync('/proc/sys/kernel/ns_last_pid', 'utf8'));
    return Number.isInteger(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `pid` was given out after `since` and up to `now` (both `lastPid()`
 * readings), ids wrapping around at pid_max in between. A live process's id is
 * never given out again, so one that existed at `since` is never counted,
 * unless the ids wrapped past it during the command.
 */
function givenOutBetween(pid: number, since: number, now: number): boolean {
  return since <= now ? pid > since && pid <= now : pid > since || pid <= now;
}

/**
 * The live processes of process group `pgid` that a command started after
 * `since` (a `lastPid()` reading) left behind, read from /proc: not the
 * group's leader nor the shell (the same process, except in a sandbox, whose init leads), not the shell's lifeline watcher, not zombies
 * (they are gone, waiting to be reaped), and not what earlier commands left
 * running on purpose (their ids were given out before `since`).
 */
export function groupStragglers(pgid: number, since?: number, shell = pgid): number[] {
  const found: number[] = [];
  const now = since === undefined ? undefined : lastPid();
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return found;
  }
  for (const name of entries) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === pgid || pid === shell) continue;
    if (since !== undefined && now !== undefined && !givenOutBetween(pid, since, now)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // After the command name (in parentheses): state, ppid, pgrp.
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(pgrp) !== pgid || state === 'Z' || state === 'X') continue;
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(LIFELINE_NAME)) continue;
      found.push(pid);
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/** Signals each process; one already gone is skipped. */
export function signalEach(pids: readonly number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // ESRCH: gone.
    }
  }
}

/**
 * Waits until `until` (performance.now()) for what an interrupted command
 * (started after the `lastPid()` reading `since`; undefined: anything in the
 * group) left in the shell's group to end, then kills what is left with SIGKILL,
 * while `current()` says the group is still the runtime's. True when it killed any.
 */
export async function reapStragglers(
  shell: { group: number; pid: number },
  since: number | undefined,
  until: number,
  current: () => boolean,
): Promise<boolean> {
  const stragglers = () => groupStragglers(shell.group, since, shell.pid);
  while (stragglers().length > 0 && performance.now() < until && current()) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const left = current() ? stragglers() : [];
  signalEach(left, 'SIGKILL');
  return left.length > 0;
}

/** Kills a shell and everything it runs: bwrap's process group (or the shell's) and, in a sandbox, the shell's group. */
export function killAll(child: ChildProcessWithoutNullStreams | undefined, shell: { group: number } | undefined): void {
  signalGroup(child, 'SIGKILL');
  if (shell && shell.group !== child?.pid) signalPid(-shell.group, 'SIGKILL');
}

/** Resolves once process `pid` has ended (gone, or a zombie waiting to be reaped), or after two seconds. */
export async function ended(pid: number): Promise<void> {
  for (let waited = 0; waited < 2_000; waited += 5) {
    const state = processState(pid);
    if (state === undefined || state === 'Z' || state === 'X') return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
