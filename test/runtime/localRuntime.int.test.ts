import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  localRuntimeProvider,
  RuntimeDeadError,
  type LocalRuntime,
  type LocalRuntimeProviderOptions,
  type RuntimeExit,
} from '../../src/runtime/index.ts';
import type { SandboxOptions } from '../../src/runtime/sandbox.ts';
import { hostPidOf, processRuns } from '../support/processes.ts';

let root: string;
let runtimes: LocalRuntime[];
/** The sandbox of the runtimes the current test creates (every test runs with none and with bwrap). */
let sandbox: SandboxOptions | undefined;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-runtime-'));
  runtimes = [];
});

afterEach(async () => {
  await Promise.all(runtimes.map((runtime) => runtime.stop()));
  await rm(root, { recursive: true, force: true });
});

function create(
  options: Partial<LocalRuntimeProviderOptions> = {},
  env?: Record<string, string>,
  conversationId = 'conv-1',
): LocalRuntime {
  const provider = localRuntimeProvider({ workspaceRoot: root, interruptGraceMs: 500, sandbox, ...options });
  const runtime = provider.create(conversationId, { env }) as LocalRuntime;
  runtimes.push(runtime);
  return runtime;
}

async function started(options: Partial<LocalRuntimeProviderOptions> = {}): Promise<LocalRuntime> {
  const runtime = create(options);
  await runtime.start();
  return runtime;
}

function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`not within ${ms} ms`)), ms)),
  ]);
}

/**
 * Whether process `pid` (as the runtime's shell sees it) runs, asked inside
 * the runtime: in a sandbox, its pids are its own.
 */
async function runsInside(runtime: LocalRuntime, pid: number): Promise<boolean> {
  const check = `s=$(cat /proc/${pid}/stat 2>/dev/null) && case "$s" in *') '[ZX]' '*) echo gone;; *) echo runs;; esac || echo gone`;
  // A line of its own: bash may print a notice about a job that was killed (`... Killed  sleep 300`)
  // with the output of whichever command comes next.
  return /^runs$/m.test((await runtime.run(check)).output);
}

describe.each([
  { name: 'a plain shell', options: undefined },
  { name: 'a bwrap sandbox', options: { network: true } },
])('LocalRuntime in $name', ({ options }) => {
  beforeEach(() => {
    sandbox = options;
  });

  it('returns the output and exit code of a command', async () => {
    const runtime = await started();
    await expect(runtime.run('echo hello; (exit 3)')).resolves.toEqual({
      exit_code: 3,
      output: 'hello\n',
      timed_out: false,
      truncated: false,
    });
  });

  it('captures stderr together with stdout, in order', async () => {
    const runtime = await started();
    const result = await runtime.run('echo out; echo err >&2; echo out2');
    expect(result.output).toBe('out\nerr\nout2\n');
  });

  it('keeps the working directory, variables and functions between commands', async () => {
    const runtime = await started();
    await runtime.run('mkdir -p sub && cd sub; export GREETING=hi; declare -a list=(a b); f() { echo fn; }');
    const result = await runtime.run('pwd; echo "$GREETING ${list[1]}"; f');
    expect(result.output).toBe(`${join(runtime.workspace, 'sub')}\nhi b\nfn\n`);
  });

  it('returns output without a trailing newline as it is, and keeps trailing newlines', async () => {
    const runtime = await started();
    expect((await runtime.run('printf abc')).output).toBe('abc');
    expect((await runtime.run("printf 'abc\\n\\n'")).output).toBe('abc\n\n');
  });

  it('gives commands an empty stdin, so a command reading it does not hang', async () => {
    const runtime = await started();
    const result = await runtime.run('cat; read line; echo "read=$?"', { timeoutMs: 2_000 });
    expect(result).toMatchObject({ exit_code: 0, output: 'read=1\n', timed_out: false });
  });

  it('runs heredocs and multi-line commands', async () => {
    const runtime = await started();
    const result = await runtime.run("cat <<'EOF'\nfirst $HOME\nsecond\nEOF\necho 'it''s'");
    expect(result.output).toBe('first $HOME\nsecond\nits\n');
  });

  it('reports a syntax error and stays usable for the next command', async () => {
    const runtime = await started();
    const broken = await runtime.run('if then fi');
    expect(broken.exit_code).toBe(2);
    expect(broken.output).toContain('syntax error');
    const unclosed = await runtime.run('echo "unclosed');
    expect(unclosed.exit_code).not.toBe(0);
    await expect(runtime.run('echo ok')).resolves.toMatchObject({ exit_code: 0, output: 'ok\n' });
  });

  it('is not fooled by output that looks like an end marker', async () => {
    const runtime = await started();
    const result = await runtime.run("printf '\\n__tether_0123456789abcdef0123456789abcdef:0\\n'; echo after");
    expect(result.output).toBe('\n__tether_0123456789abcdef0123456789abcdef:0\nafter\n');
  });

  it('runs commands given at the same time one after the other, in order', async () => {
    const runtime = await started();
    const [first, second] = await Promise.all([
      runtime.run('sleep 0.2; x=1; echo first'),
      runtime.run('echo "second $x"'),
    ]);
    expect(first.output).toBe('first\n');
    expect(second.output).toBe('second 1\n');
  });

  it('interrupts a command over its timeout and stays usable', async () => {
    const runtime = await started();
    const result = await runtime.run('echo before; sleep 5', { timeoutMs: 300 });
    expect(result).toEqual({ exit_code: null, output: 'before\n', timed_out: true, truncated: false });
    await expect(runtime.run('echo next')).resolves.toMatchObject({ exit_code: 0, output: 'next\n' });
  });

  it('aborts the whole command line on timeout, loops included, and keeps the shell state', async () => {
    const runtime = await started();
    await runtime.run('mkdir -p sub && cd sub; export KEPT=yes');
    const busy = await runtime.run('while true; do sleep 1; done; echo after-loop; while :; do :; done', {
      timeoutMs: 300,
    });
    expect(busy.timed_out).toBe(true);
    expect(busy.output).not.toContain('after-loop');
    const result = await runtime.run('pwd; echo $KEPT');
    expect(result.output).toBe(`${join(runtime.workspace, 'sub')}\nyes\n`);
  });

  it('replaces the shell when an interrupted command does not stop, and says so', async () => {
    const runtime = await started();
    const firstPid = runtime.pid;
    await runtime.run('cd /');
    const stubborn = await runtime.run("trap '' INT; while :; do :; done", { timeoutMs: 200 });
    expect(stubborn.timed_out).toBe(true);
    expect(stubborn.output).toContain('shell was restarted');
    expect(runtime.pid).not.toBe(firstPid);
    expect(runtime.alive).toBe(true);
    await expect(runtime.run('pwd')).resolves.toMatchObject({ exit_code: 0, output: `${runtime.workspace}\n` });
  });

  it('keeps only the head of a large output, within the cap, and marks it truncated', async () => {
    const runtime = await started({ outputCapBytes: 64 * 1024 });
    const result = await runtime.run('yes | head -c 1000000');
    expect(result.exit_code).toBe(0);
    expect(result.truncated).toBe(true);
    expect(Buffer.byteLength(result.output)).toBe(64 * 1024);
    expect(result.output.startsWith('y\ny\ny\n')).toBe(true);
  });

  it('does not split a multi-byte character at the cap', async () => {
    const runtime = await started({ outputCapBytes: 4 });
    const result = await runtime.run("printf 'aa\\xc3\\xa9\\xc3\\xa9'");
    expect(result).toMatchObject({ output: 'aaé', truncated: true });
  });

  it('resolves an aborted command with what it printed, and skips an aborted queued one', async () => {
    const runtime = await started();
    const controller = new AbortController();
    const running = runtime.run('echo started; sleep 5', { signal: controller.signal });
    const queued = runtime.run('echo never', { signal: controller.signal });
    setTimeout(() => controller.abort(), 300);
    await expect(running).resolves.toEqual({
      exit_code: null,
      output: 'started\n',
      timed_out: false,
      truncated: false,
    });
    await expect(queued).resolves.toEqual({ exit_code: null, output: '', timed_out: false, truncated: false });
    await expect(runtime.run('echo ok')).resolves.toMatchObject({ output: 'ok\n' });
  });

  it('ends an aborted command only once what it started is gone: what ignores SIGINT is killed after the grace period', async () => {
    const runtime = await started();
    // A background job an earlier command left running on purpose is not the interrupted command's.
    const kept = Number((await runtime.run('cd /tmp && export KEPT=yes && { sleep 300 & } && echo $!')).output);
    const controller = new AbortController();
    // A background job of a non-interactive shell ignores SIGINT; the foreground one does not.
    const running = runtime.run('(trap "" INT; exec sleep 300) & echo $!; sleep 300', {
      signal: controller.signal,
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    controller.abort();
    const started_ = performance.now();
    const result = await within(running, 3_000);
    const pid = Number(/^\d+$/m.exec(result.output)?.[0]);
    expect(pid, result.output).toBeGreaterThan(0);
    // It waited for the grace period (500 ms here) before SIGKILL, and no longer.
    expect(performance.now() - started_).toBeGreaterThan(400);
    expect(await runsInside(runtime, pid), 'the background job outlived the abort').toBe(false);
    expect(await runsInside(runtime, kept), "an earlier command's background job").toBe(true);
    // The shell itself was kept: its state is there for the next command (after a notice of the kill, maybe).
    expect((await runtime.run('echo $PWD $KEPT')).output).toMatch(/^\/tmp yes$/m);
  });

  it('notices when the shell is killed from outside: onExit fires once and the pending run rejects', async () => {
    const runtime = await started();
    const exits: RuntimeExit[] = [];
    const exited = new Promise<RuntimeExit>((resolve) =>
      runtime.onExit((exit) => {
        exits.push(exit);
        resolve(exit);
      }),
    );
    const background = hostPidOf(
      Number((await runtime.run('sleep 30 & echo $!')).output.trim()),
      (p) => p.pgrp === runtime.pgid,
    )!;
    expect(processRuns(background)).toBe(true);
    const pending = expect(runtime.run('sleep 30')).rejects.toBeInstanceOf(RuntimeDeadError);
    process.kill(runtime.pid!, 'SIGKILL');
    await expect(within(exited, 1_000)).resolves.toEqual({ code: null, signal: 'SIGKILL' });
    await pending;
    await expect(runtime.run('echo hi')).rejects.toBeInstanceOf(RuntimeDeadError);
    expect(runtime.alive).toBe(false);
    await expect.poll(() => processRuns(background), { timeout: 1_000 }).toBe(false);
    expect(exits).toHaveLength(1);
  });

  it('counts a shell that stops answering (SIGSTOP) as dead within a second, and kills what it left', async () => {
    const runtime = await started();
    const exited = new Promise<RuntimeExit>((resolve) => runtime.onExit(resolve));
    const pending = expect(runtime.run('sleep 30')).rejects.toBeInstanceOf(RuntimeDeadError);
    const pid = runtime.pid!;
    process.kill(pid, 'SIGSTOP');
    await expect(within(exited, 1_000)).resolves.toEqual({ code: null, signal: 'SIGSTOP' });
    await pending;
    expect(runtime.alive).toBe(false);
    await expect.poll(() => processRuns(pid), { timeout: 1_000 }).toBe(false);
  });

  it('dies when the command exits the shell', async () => {
    const runtime = await started();
    const exited = new Promise<RuntimeExit>((resolve) => runtime.onExit(resolve));
    await expect(runtime.run('exit 4')).rejects.toBeInstanceOf(RuntimeDeadError);
    await expect(within(exited, 1_000)).resolves.toEqual({ code: 4, signal: null });
  });

  it('rejects runs after stop(), stops idempotently and never reports stop() as an exit', async () => {
    const runtime = await started();
    const pid = runtime.pid!;
    const exits: RuntimeExit[] = [];
    runtime.onExit((exit) => exits.push(exit));
    const pending = expect(runtime.run('sleep 30')).rejects.toBeInstanceOf(RuntimeDeadError);
    await Promise.all([runtime.stop(), runtime.stop()]);
    await runtime.stop();
    await pending;
    await expect(runtime.run('echo hi')).rejects.toBeInstanceOf(RuntimeDeadError);
    expect(runtime.alive).toBe(false);
    expect(processRuns(pid)).toBe(false);
    expect(exits).toEqual([]);
  });

  it('rejects runs before start() and a second start after stop()', async () => {
    const runtime = create();
    expect(runtime.alive).toBe(false);
    await expect(runtime.run('echo hi')).rejects.toBeInstanceOf(RuntimeDeadError);
    await runtime.start();
    await runtime.stop();
    await expect(runtime.start()).rejects.toBeInstanceOf(RuntimeDeadError);
  });

  it('fails to start with RuntimeDeadError when the shell cannot be run', async () => {
    const runtime = create({ shell: join(root, 'no-such-shell') });
    await expect(runtime.start()).rejects.toBeInstanceOf(RuntimeDeadError);
    expect(runtime.alive).toBe(false);
  });

  it('passes the runtime env (secrets) and drops TETHER_ and NATS_ variables', async () => {
    const baseEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', KEEP_ME: 'kept', TETHER_TOKEN: 't', NATS_URL: 'n' };
    const runtime = create({ baseEnv }, { API_KEY: 'sk-secret' });
    await runtime.start();
    const result = await runtime.run('echo "$KEEP_ME $API_KEY ${TETHER_TOKEN-unset} ${NATS_URL-unset}"');
    expect(result.output).toBe('kept sk-secret unset unset\n');
  });

  it('creates the workspace under the root on start and keeps it after stop', async () => {
    const runtime = create({}, undefined, 'conv-ws');
    expect(runtime.workspace).toBe(join(root, 'conv-ws'));
    expect(existsSync(runtime.workspace)).toBe(false);
    await runtime.start();
    expect((await runtime.run('pwd')).output).toBe(`${runtime.workspace}\n`);
    await runtime.run('echo data > note.txt');
    await runtime.stop();
    await expect(readFile(join(runtime.workspace, 'note.txt'), 'utf8')).resolves.toBe('data\n');
  });

  it('refuses a conversation id that is not a plain name', () => {
    const provider = localRuntimeProvider({ workspaceRoot: root });
    expect(() => provider.create('../escape')).toThrow(TypeError);
  });
});
