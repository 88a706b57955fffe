import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { lifeline } from './lifeline.ts';
import { ansiCQuote } from './outputCapture.ts';
import type { RuntimeExit } from './runtime.ts';

/** How a conversation's shell is confined: `bwrap` (bubblewrap) or `none` (a plain shell of the server's user). */
export type SandboxMode = 'bwrap' | 'none';

export interface SandboxOptions {
  /** False: the sandbox gets its own network namespace with only a loopback (`TETHER_SANDBOX_NETWORK=none`). */
  network: boolean;
}

/** System folders bound read-only into the sandbox (each one only when it exists). */
const SYSTEM_FOLDERS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc', '/opt'];

/** The file descriptor bwrap reports its child's pid on (`--info-fd`): after the shell's 0–2 and its lifeline (3). */
export const SANDBOX_INFO_FD = 4;

/**
 * bwrap's arguments for a shell confined to `workspace`, up to the command.
 *
 * What is inside: the system folders read-only, a private `/tmp`, fresh
 * `/proc` and `/dev`, the workspace read-write at its own path (its working
 * directory), and nothing else of the host: not the data folder, not other
 * workspaces, not the server's files. Every namespace is its own (pid, ipc,
 * uts, mount, user, cgroup; the network unless `network`). `--new-session`
 * puts the shell in a process group of its own, led by bwrap's child (the
 * namespace's init), so that a SIGINT to that group reaches the command and
 * not bwrap; `--die-with-parent` ends the sandbox with its bwrap. Capabilities
 * are dropped: run as root, bwrap would keep them. The root of the mount tree
 * is remounted read-only last, so the folders bwrap made for the mount points
 * are not writable either.
 */
export function bwrapArgs(workspace: string, options: SandboxOptions): string[] {
  const args = ['--unshare-all', '--die-with-parent', '--new-session', '--cap-drop', 'ALL'];
  if (options.network) args.push('--share-net');
  for (const folder of SYSTEM_FOLDERS) args.push('--ro-bind-try', folder, folder);
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp');
  // Where /etc/resolv.conf points on hosts that run systemd-resolved.
  args.push('--ro-bind-try', '/run/systemd/resolve', '/run/systemd/resolve');
  args.push('--bind', workspace, workspace, '--chdir', workspace, '--remount-ro', '/');
  return args;
}

/**
 * The environment a sandboxed shell starts with: HOME is the private `/tmp`
 * (the server user's home is not inside) and TMPDIR is dropped (it names a
 * host folder). bwrap itself is started with this environment, since its init
 * is visible in the sandbox's `/proc`.
 */
export function sandboxEnv(env: Record<string, string>): Record<string, string> {
  const { TMPDIR: _tmpdir, ...rest } = env;
  return { ...rest, HOME: '/tmp' };
}

/** A bwrap exit code of 128 + n: its shell was killed by signal n (bwrap reports it that way). */
export function signalOfExitCode(code: number | null): NodeJS.Signals | null {
  if (code === null || code <= 128) return null;
  const found = Object.entries(constants.signals).find(([, value]) => value === code - 128);
  return found ? (found[0] as NodeJS.Signals) : null;
}

/**
 * Whether bwrap can run a sandbox here, as the server will (same arguments on
 * a throw-away workspace): null when it can, else why not (bwrap missing,
 * user namespaces refused, ...). Takes a few milliseconds.
 */
export async function probeBwrap(options: SandboxOptions, timeoutMs = 5_000): Promise<string | null> {
  const workspace = await mkdtemp(join(tmpdir(), 'tether-sandbox-probe-'));
  try {
    return await new Promise<string | null>((resolve) => {
      const child = spawn('bwrap', [...bwrapArgs(workspace, options), '--', 'true'], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(`bwrap did not answer within ${timeoutMs} ms`);
      }, timeoutMs);
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', (err) => {
        clearTimeout(timer);
        resolve(`bwrap cannot be run (${err.message})`);
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        if (code === 0) resolve(null);
        else resolve(`bwrap failed (${signal ?? `exit ${code}`}): ${stderr.trim().slice(0, 300)}`);
      });
    });
  } finally {
    await rm(workspace, { recursive: true, force: true });
  }
}

/**
 * The host pids of a sandbox's init (bwrap's child, read from its info fd:
 * it leads the shell's process group) and of the shell (the init's one
 * child), or undefined when the sandbox ended before both were seen.
 */
export async function sandboxPids(info: Readable): Promise<{ group: number; shell: number } | undefined> {
  let text = '';
  for await (const chunk of info) text += String(chunk);
  const group = Number((/"child-pid":\s*(\d+)/.exec(text) ?? [])[1]);
  if (!Number.isInteger(group) || group <= 0) return undefined;
  // The init forks the shell right after it reports: wait for it (a few milliseconds at most).
  for (let tries = 0; tries < 400; tries++) {
    const shell = firstChild(group);
    if (shell !== undefined) return { group, shell };
    if (!existsSync(`/proc/${group}`)) return undefined;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return undefined;
}

function firstChild(pid: number): number | undefined {
  try {
    const first = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ')[0];
    return first ? Number(first) : undefined;
  } catch {
    return undefined;
  }
}

/** How a sandboxed shell ended: bwrap exits with 128 + n when its shell was killed by signal n. */
export function sandboxExit(code: number | null, signal: NodeJS.Signals | null): RuntimeExit {
  const bySignal = signalOfExitCode(code);
  return bySignal ? { code: null, signal: bySignal } : { code, signal };
}

/** `export NAME=value` lines for the shell to run (values quoted; names are environment variable names). */
export function exportLines(variables: Record<string, string>): string {
  return Object.entries(variables)
    .map(([name, value]) => `export ${name}=${ansiCQuote(value)}\n`)
    .join('');
}

/**
 * The script of the bash that starts a sandbox: the lifeline's watcher (see
 * lifeline.ts), outside the sandbox where no command can see or kill it and
 * without the info fd (bwrap's reader waits for it to close), then `exec` of
 * bwrap (its arguments), so bwrap is this process and leads the group the
 * watcher kills: bwrap's death ends the sandbox (`--die-with-parent`).
 */
export function sandboxLauncher(heartbeatTimeoutMs: number | undefined): string {
  return `${lifeline(heartbeatTimeoutMs, `${SANDBOX_INFO_FD}>&- `)}exec "$@"\n`;
}

/**
 * The arguments of the bash that starts `shell` (its argv) in a sandbox on
 * `workspace`: the launcher script, then bwrap's command line.
 */
export function sandboxedArgv(
  workspace: string,
  options: SandboxOptions,
  heartbeatTimeoutMs: number | undefined,
  shell: readonly string[],
): string[] {
  const bwrap = ['bwrap', ...bwrapArgs(workspace, options), '--info-fd', String(SANDBOX_INFO_FD), '--', ...shell];
  return ['--noprofile', '--norc', '-c', sandboxLauncher(heartbeatTimeoutMs), 'tether-sandbox', ...bwrap];
}
