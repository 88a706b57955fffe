import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import {
  allEvents,
  createConversation,
  eventsWhen,
  http,
  type HttpResult,
  type ServerProcess,
} from '../support/serverProcess.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { bashesIn, processes, runtimeShellIn } from '../support/processes.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

// Everything here goes over REST: a WebSocket connection to a conversation whose
// runtime was lost starts a new runtime by design, and that is not what is tested.

const e2e = useE2e();

/** Ends a command left behind by a killed runtime (its `sleep 30`), if it still runs. */
function endOrphan(pid: number): void {
  try {
    if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'sleep') process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

const isState = (e: LoggedEvent, state: string) =>
  e.event.type === 'agent_state_changed' && e.event.data.state === state;
const isRuntime = (e: LoggedEvent, status: string) =>
  e.event.type === 'runtime_status' && e.event.data.status === status;

function runCommand(server: ServerProcess, id: string, command: string) {
  return http<Record<string, unknown>>(server.baseUrl, 'POST', `/api/conversations/${id}/actions`, {
    action: { type: 'run', command },
  });
}

/**
 * A conversation waiting for the user, whose runtime bash is then killed with
 * SIGKILL in the middle of `sleep 30`; resolves once the loss is stored
 * (`runtime_status disconnected`, the agent in error, the command's output).
 */
async function loseRuntime(server: ServerProcess, id: string): Promise<LoggedEvent[]> {
  const workspace = join(server.dataDir, 'workspaces', id);
  await eventsWhen(
    server,
    id,
    'the runtime to connect and the agent to await the user',
    (e) => endsAwaiting(e) && e.some((x) => isRuntime(x, 'connected')),
  );
  const sent = await runCommand(server, id, 'sleep 30');
  expect(sent.status).toBe(202);
  // The runtime is the server's bash in the workspace; the command is running once its sleep is.
  const [bash, sleep] = await until(
    async () => {
      const all = processes();
      const runtime = runtimeShellIn(workspace, server.pid);
      const child = runtime && all.find((p) => p.comm === 'sleep' && p.ppid === runtime.pid);
      return runtime && child ? [runtime.pid, child.pid] : undefined;
    },
    'the runtime bash running sleep 30',
    SERVER_WAIT,
  );
  e2e.onCleanup(() => endOrphan(sleep));
  const before = (await allEvents(server.baseUrl, id)).at(-1)!.seq;
  process.kill(bash, 'SIGKILL');
  return eventsWhen(server, id, 'the runtime loss to be stored', (e) => {
    const after = e.filter((x) => x.seq > before);
    return (
      after.some((x) => isRuntime(x, 'disconnected')) &&
      after.some((x) => isState(x, 'error')) &&
      e.some((x) => x.event.type === 'command_output' && x.event.data.command === 'sleep 30')
    );
  });
}

interface Answer {
  http: { status: number; keys: string[]; duplicate: unknown };
  output: { exit_code: number | null; says_not_available: boolean; text: string } | undefined;
  states: string[];
  runtime: string[];
}

/**
 * Runs `command` over REST and waits until its story is told: its output is
 * stored and the log stays the same for a moment with the agent out of running.
 */
async function answerTo(server: ServerProcess, id: string, command: string): Promise<Answer> {
  const res: HttpResult<Record<string, unknown>> = await runCommand(server, id, command);
  const isAsked = (e: LoggedEvent) =>
    e.event.source === 'user' && e.event.type === 'command' && e.event.data.command === command;
  let seen = -1;
  // Quiet: the same log, done, on two reads 300 ms apart.
  const events = await until(
    async () => {
      const all = await allEvents(server.baseUrl, id);
      const asked = all.find(isAsked);
      const done =
        asked !== undefined &&
        all.some((e) => e.event.type === 'command_output' && e.event.cause === asked.event.id) &&
        all.at(-1)!.event.type === 'agent_state_changed' &&
        !isState(all.at(-1)!, 'running');
      const quiet = done && all.length === seen;
      seen = done ? all.length : -1;
      return quiet ? all : undefined;
    },
    `the answer to ${command}`,
    { ...SERVER_WAIT, timeoutMs: 15_000, everyMs: 300 },
  );
  const asked = events.find(isAsked)!;
  const after = events.filter((e) => e.seq > asked.seq);
  const output = after.find((e) => e.event.type === 'command_output' && e.event.cause === asked.event.id);
  return {
    http: { status: res.status, keys: Object.keys(res.body ?? {}).sort(), duplicate: res.body?.duplicate },
    output:
      output?.event.type === 'command_output'
        ? {
            exit_code: output.event.data.exit_code,
            says_not_available: /runtime is not available/.test(output.event.data.output),
            text: output.event.data.output,
          }
        : undefined,
    states: after.flatMap((e) => (e.event.type === 'agent_state_changed' ? [e.event.data.state] : [])),
    runtime: after.flatMap((e) => (e.event.type === 'runtime_status' ? [e.event.data.status] : [])),
  };
}

/** An answer without its free text, for comparing two answers by kind. */
const kindOf = ({ output, ...rest }: Answer) => ({
  ...rest,
  output: output && { exit_code: output.exit_code, says_not_available: output.says_not_available },
});

describe('a run action over REST after the runtime was killed', () => {
  it('is answered "runtime not available" whether or not the server restarted in between, and never starts a new runtime', async () => {
    const dataDir = await e2e.tempDir();
    const first = await e2e.start({ dataDir });

    // Without a restart: the lost runtime is not replaced behind the user's back.
    const stays = await createConversation(first.baseUrl);
    await loseRuntime(first, stays);
    const baseline = await answerTo(first, stays, 'echo after-loss');
    expect(baseline.http.status).toBe(202);
    expect(baseline.output).toMatchObject({ exit_code: null, says_not_available: true });
    expect(baseline.runtime).not.toContain('connected');
    expect(bashesIn(join(dataDir, 'workspaces', stays))).toEqual([]);

    // With a restart between the loss and the action.
    const restarts = await createConversation(first.baseUrl);
    await loseRuntime(first, restarts);
    const lastBeforeRestart = (await allEvents(first.baseUrl, restarts)).at(-1)!.seq;
    expect(await first.stop()).toEqual({ code: 0, signal: null });
    const second = await e2e.start({ dataDir });
    const restarted = await answerTo(second, restarts, 'echo after-restart');

    expect(kindOf(restarted), 'the answer after a restart, next to the one without').toEqual(kindOf(baseline));
    const sinceRestart = (await allEvents(second.baseUrl, restarts)).filter((e) => e.seq > lastBeforeRestart);
    expect(
      sinceRestart.filter((e) => isRuntime(e, 'connected')),
      'runtime_status connected since the restart',
    ).toEqual([]);
    expect(bashesIn(join(dataDir, 'workspaces', restarts)), 'a runtime bash in the workspace').toEqual([]);
  }, 60_000);
});
