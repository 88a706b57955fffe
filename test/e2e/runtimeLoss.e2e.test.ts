import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { runtimeShellIn } from '../support/processes.ts';
import { createConversation, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor, type Frame } from '../support/wsClient.ts';

const e2e = useE2e();
let server: ServerProcess;

beforeAll(async () => {
  server = await e2e.start();
}, 60_000);

/** The conversation's runtime: the bash that the server started in its workspace. */
const runtimePid = (serverPid: number, workspace: string): number | undefined =>
  runtimeShellIn(workspace, serverPid)?.pid;

const stateIs = (state: string) => (f: Frame) =>
  f.type === 'event' && f.event.type === 'agent_state_changed' && f.event.data.state === state;

describe('a runtime killed in the middle of a command', () => {
  it('puts the agent in error with the status frame within a second, and the next connection brings a working runtime back, 20 times over', async () => {
    const id = await createConversation(server.baseUrl);
    const workspace = join(server.dataDir, 'workspaces', id);
    const detection: number[] = [];
    // Like a real client, each connection resumes from the cursor of the one before.
    let cursor: number;
    const first = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    await first.waitFor(
      (f) => (f.type === 'sync' && f.state === 'awaiting_user_input') || stateIs('awaiting_user_input')(f),
      { what: 'the start' },
    );
    await first.roundTrip();
    cursor = first.lastSeq();
    await first.close();
    for (let round = 0; round < 20; round++) {
      const client = await WsClient.connect(wsUrlFor(server.wsUrl, id, cursor));
      await client.waitFor((f) => f.type === 'sync' && f.state === 'awaiting_user_input', {
        what: `round ${round}: awaiting the user`,
      });
      const from = client.frames.length;
      client.send({ type: 'user_action', action: { type: 'run', command: `echo round-${round}; sleep 30` } });
      await client.waitFor((f) => f.type === 'event' && f.event.type === 'command', { from, what: 'the command' });
      let pid: number | undefined;
      await client.waitUntil(() => (pid = runtimePid(server.pid, workspace)) !== undefined, {
        what: 'the runtime process',
      });
      const killedAt = Date.now();
      process.kill(pid!, 'SIGKILL');
      await client.waitFor((f) => f.type === 'status' && f.id === 'STATUS$ERROR_RUNTIME_DISCONNECTED', {
        from,
        what: 'the status frame',
      });
      await client.waitFor(stateIs('error'), { from, what: 'the error state' });
      detection.push(Date.now() - killedAt);
      const output = await client.waitFor((f) => f.type === 'event' && f.event.type === 'command_output', {
        from,
        what: 'the observation',
      });
      expect(output.type === 'event' && output.event.data).toMatchObject({ exit_code: null });
      await client.roundTrip();
      cursor = client.lastSeq();
      await client.close();

      // The next connection (a page refresh) starts a new runtime; a command succeeds in it.
      const again = await WsClient.connect(wsUrlFor(server.wsUrl, id, cursor));
      const start = again.frames.length;
      await again.waitFor(stateIs('awaiting_user_input'), { what: 'the reconnected runtime' });
      again.send({ type: 'user_action', action: { type: 'run', command: `echo back-${round}` } });
      const back = await again.waitFor(
        (f) => f.type === 'event' && f.event.type === 'command_output' && f.event.data.output === `back-${round}\n`,
        { from: start, what: 'a command in the new runtime' },
      );
      expect(back.type === 'event' && back.event.data).toMatchObject({ exit_code: 0 });
      await again.waitFor(stateIs('awaiting_user_input'), {
        from: again.frames.indexOf(back),
        what: 'the command to settle',
      });
      await again.roundTrip();
      cursor = again.lastSeq();
      await again.close();
    }
    expect(detection).toHaveLength(20);
    expect(Math.max(...detection)).toBeLessThanOrEqual(1_000);
  }, 240_000);
});
