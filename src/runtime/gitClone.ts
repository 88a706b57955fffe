import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TetherError } from '../errors.ts';
import { heartbeat, lifeline } from './lifeline.ts';
import type { ClonedRepository } from './runtime.ts';
import { serverFreeEnv } from './serverFreeEnv.ts';

export interface CloneOptions {
  /** What `git clone` is given: an https, http, ssh or git:// URL (no local path, see ALLOWED_PROTOCOLS). */
  url: string;
  /** The branch to check out; the remote's default branch when absent. */
  branch?: string;
  /** An access token for an http(s) remote, given to git as the password of `x-access-token`. */
  token?: string;
  /** The workspace folder: created when missing, emptied (but kept: a sandbox may bind it) when not empty. */
  dir: string;
  /** After this long the clone is killed and rejected. */
  timeoutMs: number;
  /** When set, the clone dies this long after this process stops beating (frozen, see lifeline.ts). */
  heartbeatTimeoutMs?: number;
  /** Aborting kills the clone and rejects it as cancelled. */
  signal?: AbortSignal;
  /** The environment git starts from (default `process.env`); Tether's own variables are left out. */
  env?: NodeJS.ProcessEnv;
  /** Called with the pid of the clone's process group leader, as soon as it is spawned (for tests). */
  onSpawn?: (pid: number) => void;
}

/**
 * A clone that did not happen: `reason` says why in one line fit for a user
 * (never the token). `code` tells a failure of git (CLONE_FAILED) from our
 * own stop: CLONE_TIMED_OUT, CLONE_CANCELLED.
 */
export class CloneError extends TetherError {
  readonly reason: string;
  constructor(code: 'CLONE_FAILED' | 'CLONE_TIMED_OUT' | 'CLONE_CANCELLED', reason: string) {
    super(code, `could not clone the repository: ${reason}`);
    this.reason = reason;
  }
}

/**
 * The variable that holds the token in the environment of the clone's git
 * process, and only there: the askpass helper prints it as the password.
 */
export const TOKEN_VARIABLE = 'TETHER_CLONE_TOKEN';
/** The user name the helper gives with a token: GitHub's for app and OAuth tokens; many hosts take any name. */
const TOKEN_USER = 'x-access-token';

/**
 * The transports a clone may use. The host runs the clone, not a sandbox: a
 * local path would copy any repository this server can read (another
 * conversation's workspace) into a workspace, and `ext::` runs a command. A
 * `file://` URL is taken only as such, where the server allows it (the REST
 * layer refuses it otherwise: TETHER_REPO_FILE_URLS).
 */
const ALLOWED_PROTOCOLS = 'https:http:ssh:git';

function allowedProtocols(url: string): string {
  return url.startsWith('file://') ? `${ALLOWED_PROTOCOLS}:file` : ALLOWED_PROTOCOLS;
}

/** Output kept of each stream: the end, where git says why it failed. */
const CAPTURE_BYTES = 8 * 1024;
const REASON_CHARS = 300;

/**
 * Variables that point git at another repository or configuration (set when
 * this server runs under git, in a hook say): `git rev-parse --local-env-vars`.
 */
const REPOSITORY_VARIABLES = new Set([
  'GIT_ALTERNATE_OBJECT_DIRECTORIES',
  'GIT_CONFIG',
  'GIT_CONFIG_PARAMETERS',
  'GIT_CONFIG_COUNT',
  'GIT_OBJECT_DIRECTORY',
  'GIT_DIR',
  'GIT_WORK_TREE',
  'GIT_IMPLICIT_WORK_TREE',
  'GIT_GRAFT_FILE',
  'GIT_INDEX_FILE',
  'GIT_NO_REPLACE_OBJECTS',
  'GIT_REPLACE_REF_BASE',
  'GIT_PREFIX',
  'GIT_INTERNAL_SUPER_PREFIX',
  'GIT_SHALLOW_FILE',
  'GIT_COMMON_DIR',
]);

/**
 * Clones `url` into `dir` from this (the host) process, and resolves with what
 * was checked out. Git runs in a process group of its own that dies with this
 * process (see lifeline.ts), on `timeoutMs` and on `signal`. The token reaches
 * only that git's environment: never a command line, `.git/config` or a file.
 * Rejects with a {@link CloneError}.
 */
export async function cloneRepository(options: CloneOptions): Promise<ClonedRepository> {
  const { url, branch, token, timeoutMs, signal } = options;
  if (!(Number.isFinite(timeoutMs) && timeoutMs >= 1)) {
    throw new RangeError(`timeoutMs must be a finite number of at least 1, not ${timeoutMs}`);
  }
  if (signal?.aborted) throw cancelled();
  const dir = resolve(options.dir);
  await emptyFolder(dir);
  const folder = await privateFolder();
  const askpass: Record<string, string> = token ? { GIT_ASKPASS: folder.askpass, [TOKEN_VARIABLE]: token } : {};
  const clone = ['git', ...GIT_OPTIONS, 'clone', '--single-branch', ...(branch ? ['--branch', branch] : [])];
  // One script, so that the sha and branch are read under the same lifeline, timeout and signal.
  const script = `${quote([...clone, '--', url, dir])} && exec ${quote(['git', '-C', dir, 'rev-parse', 'HEAD', '--abbrev-ref', 'HEAD'])}\n`;
  const isolated = { ...NO_OPERATOR_CREDENTIALS, HOME: folder.home, GIT_ALLOW_PROTOCOL: allowedProtocols(url) };
  const output = await runGit(script, {
    ...options,
    env: gitEnv(options.env ?? process.env, { ...askpass, ...isolated }),
  });
  const [commit = '', checkedOut = ''] = output.trim().split('\n');
  return { commit, branch: branch ?? checkedOut };
}

/**
 * `credential.helper=` empties the list of helpers (one from the user's git
 * config would store the token); `core.askPass=` keeps a configured one from
 * prompting when there is no token (GIT_ASKPASS, when set, comes first anyway).
 */
const GIT_OPTIONS = ['-c', 'credential.helper=', '-c', 'core.askPass='];

/**
 * A clone is made for a user of the server, who must not get what the
 * server's own account may reach: no git configuration of the operator (its
 * credential helpers, extra headers, URL rewrites), no `.netrc` (HOME is an
 * empty private folder), no ssh agent or key (an ssh URL clones what needs
 * no key), never a question.
 */
const NO_OPERATOR_CREDENTIALS = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_SSH_COMMAND:
    'ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none -o IdentityFile=none ' +
    '-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/dev/null',
};

/** Empties `dir` (the leftovers of an interrupted clone), keeping the folder itself; creates it when missing. */
async function emptyFolder(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const entries = await readdir(dir);
  await Promise.all(entries.map((entry) => rm(join(dir, entry), { recursive: true, force: true })));
}

/**
 * The environment of git: the base without Tether's and NATS's variables
 * (secrets of this server), without inherited askpass programs (one could
 * prompt on a desktop, or answer with someone else's credentials), without
 * BASH_ENV (the wrapper bash would run it), and never prompting on a terminal,
 * so that a remote that wants credentials fails at once instead of waiting.
 */
function gitEnv(base: NodeJS.ProcessEnv, extra: Record<string, string>): Record<string, string> {
  const env = serverFreeEnv(base);
  for (const name of [...INHERITED_CREDENTIALS, ...REPOSITORY_VARIABLES]) delete env[name];
  return { ...env, GIT_TERMINAL_PROMPT: '0', ...extra };
}

/** Inherited variables that could prompt or answer with someone else's credentials, or run code in the wrapper bash. */
const INHERITED_CREDENTIALS = ['GIT_ASKPASS', 'SSH_ASKPASS', 'SSH_AUTH_SOCK', 'BASH_ENV', 'XDG_CONFIG_HOME'];

let helper: Promise<{ askpass: string; home: string }> | undefined;

/**
 * A private folder, made once per process and removed when it exits, with
 * the askpass helper (a script that holds no secret: it prints
 * `x-access-token` when git asks for a user name and `$TETHER_CLONE_TOKEN`
 * when it asks for a password) and an empty HOME for git.
 */
function privateFolder(): Promise<{ askpass: string; home: string }> {
  helper ??= (async () => {
    const folder = await mkdtemp(join(tmpdir(), 'tether-askpass-'));
    await chmod(folder, 0o700);
    process.once('exit', () => rmSync(folder, { recursive: true, force: true }));
    const askpass = join(folder, 'askpass.sh');
    const script = `#!/bin/sh\ncase "$1" in\n  Username*) printf '%s\\n' '${TOKEN_USER}' ;;\n  *) printf '%s\\n' "$${TOKEN_VARIABLE}" ;;\nesac\n`;
    await writeFile(askpass, script, { mode: 0o700 });
    const home = join(folder, 'home');
    await mkdir(home, { mode: 0o700 });
    return { askpass, home };
  })();
  return helper;
}

/** Quotes each word for bash. */
function quote(words: readonly string[]): string {
  return words.map((word) => `'${word.replaceAll("'", `'\\''`)}'`).join(' ');
}

type RunOptions = Pick<CloneOptions, 'timeoutMs' | 'heartbeatTimeoutMs' | 'signal' | 'onSpawn' | 'token'> & {
  env: Record<string, string>;
};

/**
 * Runs `script` in a bash of its own process group tied to this process by
 * the lifeline on fd 3, and resolves with its stdout. On timeout or abort the
 * whole group is killed at once: nothing of a clone is worth a grace period.
 */
function runGit(script: string, options: RunOptions): Promise<string> {
  const { timeoutMs, heartbeatTimeoutMs, signal } = options;
  return new Promise((resolvePromise, reject) => {
    const child = spawn('bash', ['--noprofile', '--norc'], {
      env: options.env,
      detached: true, // own process group: one signal reaches git and the helpers it started
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    });
    const stdout = tail(child.stdout);
    const stderr = tail(child.stderr);
    const line = child.stdio[3] as Socket;
    line.unref();
    line.on('error', () => {}); // a heartbeat to a group that died: its exit says so
    const stopHeartbeat = heartbeatTimeoutMs === undefined ? () => {} : heartbeat(() => line, heartbeatTimeoutMs);
    let stopped: CloneError | undefined;
    const stop = (error: CloneError) => {
      stopped ??= error;
      killGroup(child.pid);
    };
    const timer = setTimeout(
      () => stop(new CloneError('CLONE_TIMED_OUT', `the clone timed out after ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onAbort = () => stop(cancelled());
    signal?.addEventListener('abort', onAbort, { once: true });
    const cleanUp = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      stopHeartbeat();
      line.destroy(); // the watcher sees EOF: it takes down whatever git left in the group, and itself
    };
    child.on('error', (error) => {
      cleanUp();
      reject(new CloneError('CLONE_FAILED', `git could not be started (${error.message})`));
    });
    // 'close' waits for every stdio stream, fd 3 too, which the watcher holds open until cleanUp closes ours.
    child.on('exit', cleanUp);
    child.on('close', (code, exitSignal) => {
      if (stopped || code !== 0) reject(stopped ?? failure(stderr(), code, exitSignal, options));
      else resolvePromise(stdout());
    });
    if (child.pid !== undefined) options.onSpawn?.(child.pid);
    child.stdin.on('error', () => {}); // EPIPE when bash died at once: its exit says why
    child.stdin.end(lifeline(heartbeatTimeoutMs) + script);
  });
}

function cancelled(): CloneError {
  return new CloneError('CLONE_CANCELLED', 'the clone was cancelled');
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // ESRCH: the group is already gone.
  }
}

/** Collects a stream, keeping its last CAPTURE_BYTES; the returned function reads them. */
function tail(stream: NodeJS.ReadableStream): () => string {
  let kept = Buffer.alloc(0);
  stream.on('data', (chunk: Buffer) => {
    kept = Buffer.concat([kept, chunk]);
    if (kept.length > CAPTURE_BYTES) kept = kept.subarray(kept.length - CAPTURE_BYTES);
  });
  return () => kept.toString('utf8');
}

/** Git's own words for what went wrong, turned into a user's. */
const KNOWN_FAILURES: [RegExp, string][] = [
  [
    /could not read (Username|Password)/,
    'authentication required: the remote asks for credentials and no token was given',
  ],
  [/You appear to have cloned an empty repository/, 'the repository is empty (it has no commits)'],
];

/** The reason of a failed clone in one line: git's last `fatal:` lines (else its last line), token masked. */
function failure(
  stderr: string,
  code: number | null,
  signal: NodeJS.Signals | null,
  options: Pick<RunOptions, 'token'>,
): CloneError {
  const known = KNOWN_FAILURES.find(([pattern]) => pattern.test(stderr));
  const lines = stderr
    .split(/[\r\n]+/)
    .map((text) => text.trim())
    .filter(Boolean);
  const fatal = lines.filter((text) => text.startsWith('fatal:')).map((text) => text.slice('fatal:'.length).trim());
  const said = known?.[1] ?? (fatal.length > 0 ? fatal.join('; ') : lines.at(-1));
  const exit = signal ? `git was killed by ${signal}` : `git exited with code ${code}`;
  return new CloneError('CLONE_FAILED', mask(said ?? exit, options.token).slice(0, REASON_CHARS));
}

/** Hides the token and the credentials of a URL (`https://user:secret@host`), should git have echoed them. */
function mask(text: string, token: string | undefined): string {
  const hidden = token ? text.replaceAll(token, '***') : text;
  return hidden.replace(/(\/\/)[^/@\s]+@/g, '$1***@');
}
