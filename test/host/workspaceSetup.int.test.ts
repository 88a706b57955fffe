import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import type { StoredEvent } from '../../protocol/index.ts';
import { localRuntimeProvider } from '../../src/runtime/index.ts';
import { memoryConversationStore, memoryEventLog, memorySnapshotStore } from '../../src/store/index.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

/** A conversation on a real bash runtime whose workspace already holds `script` as .tether/setup.sh. */
async function withSetupScript(script: string) {
  const root = await mkdtemp(join(tmpdir(), 'tether-setup-'));
  dirs.push(root);
  const log = memoryEventLog();
  const id = 'setup0conversation';
  await mkdir(join(root, id, '.tether'), { recursive: true });
  await writeFile(join(root, id, '.tether', 'setup.sh'), script);
  const m = memoryHost({
    log,
    conversations: memoryConversationStore(),
    snapshots: memorySnapshotStore(),
    runtimes: localRuntimeProvider({ workspaceRoot: root }),
    agentFor: () => scriptedAgent(),
    newId: () => id,
  });
  await m.commands.create('local', { confirmation_mode: false, max_iterations: 10, secrets: {} });
  const events = async (): Promise<StoredEvent[]> => (await log.read(id)).items.map((i) => i.event);
  return { m, id, root, events, state: async () => (await m.session(id, 'local')).state };
}

describe('workspace set-up', () => {
  it('runs the workspace set-up script before the agent starts', async () => {
    const { m, id, root, state } = await withSetupScript('echo prepared > prepared.txt\n');
    await until(async () => (await state()) === 'awaiting_user_input', 'the start', { timeoutMs: 10_000 });
    expect(await readFile(join(root, id, 'prepared.txt'), 'utf8')).toBe('prepared\n');
    await m.shutdown();
  });

  it('fails the start with the reason when the set-up script fails', async () => {
    const { m, events, state } = await withSetupScript('echo missing dependency >&2; exit 3\n');
    await until(async () => (await state()) === 'error', 'the failed start', { timeoutMs: 10_000 });
    const lost = (await events()).find((e) => e.type === 'runtime_status' && e.data.status === 'disconnected');
    expect(lost?.type === 'runtime_status' && lost.data.message).toMatch(
      /setup\.sh failed \(exit 3\).*missing dependency/s,
    );
    await m.shutdown();
  });
});
