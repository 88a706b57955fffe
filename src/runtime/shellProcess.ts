import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { readFileSync } from 'node:fs';
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
  if (child?.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/** Resolves once the child has exited (at once when it has). */
export function exitOf(child: ChildProcessWithoutNullStreams): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}
