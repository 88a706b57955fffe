import { afterEach, describe, expect, it } from 'vitest';
import { scriptedAgent } from '../../src/agent/index.ts';
import { silentLogger } from '../../src/logger.ts';
import { ClusterOwnership } from '../../src/cluster/index.ts';
import { type NodeHost } from '../../src/host/index.ts';
import { memoryClusterBus, memoryClusterStore, memoryStores } from '../../src/store/index.ts';
import { memoryHost } from '../support/memoryHost.ts';
import { until } from '../support/until.ts';

const LEASE = 1_000;
const managers: NodeHost[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((m) => m.shutdown()));
});

/** Two nodes `a` and `b` of one cluster on shared memory stores, giving out `ids` in turn; a slow agent keeps a conversation running. */
async function twoNodes(maxRunningPerUser: number, ids: string[]) {
  const stores = memoryStores();
  const cluster = memoryClusterStore(LEASE);
  const bus = memoryClusterBus();
  const node = async (nodeId: string) => {
    const manager = memoryHost({
      ...stores,
      ownership: new ClusterOwnership({ nodeId, leaseMs: LEASE, store: cluster, logger: silentLogger }),
      bus,
      agentFor: () => scriptedAgent({ delayMs: 2_000 }),
      limits: { maxRunningPerUser },
      newId: () => ids.shift()!,
    });
    managers.push(manager);
    await manager.start();
    return manager;
  };
  return { stores, a: await node('a'), b: await node('b') };
}

describe('the per-user running cap across a cluster', () => {
  it("a conversation that starts running on one node sends the user's oldest running one on another node out of memory", async () => {
    // A slow agent: a conversation stays running while the other one starts.
    const { stores, a, b } = await twoNodes(1, ['conv1', 'conv2']);
    const body = { confirmation_mode: false, max_iterations: 10, secrets: {} };
    await a.commands.create('local', body);
    await b.commands.create('local', body);
    const state = async (id: string) => (await a.queries.info(id, 'local')).state;
    await until(async () => (await state('conv1')) === 'awaiting_user_input', 'conv1 ready');
    await until(async () => (await state('conv2')) === 'awaiting_user_input', 'conv2 ready');

    await a.commands.act('conv1', 'local', { type: 'message', content: 'first' });
    await until(async () => (await state('conv1')) === 'running', 'conv1 running');
    expect(a.isLive('conv1')).toBe(true);
    // conv2 runs on b: the user has two running, one over the cap; conv1, the older, leaves a.
    await b.commands.act('conv2', 'local', { type: 'message', content: 'second' });
    await until(() => !a.isLive('conv1'), 'conv1 to leave node a');
    const events = (await stores.log.read('conv1')).items.map((e) => e.event);
    expect(events.at(-1)).toMatchObject({ type: 'session_passivated', data: { reason: 'too_many_running' } });
    expect(b.isLive('conv2')).toBe(true);
  });
  it('counts only conversations a node runs: one passivated while running does not send a running one out', async () => {
    const { stores, a, b } = await twoNodes(2, ['conv1', 'conv2', 'conv3']);
    const body = { confirmation_mode: false, max_iterations: 10, secrets: {} };
    for (const m of [a, a, b]) await m.commands.create('local', body);
    const state = async (id: string) => (await a.queries.info(id, 'local')).state;
    for (const id of ['conv1', 'conv2', 'conv3'])
      await until(async () => (await state(id)) === 'awaiting_user_input', `${id} ready`);
    const run = async (m: NodeHost, id: string) => {
      await m.commands.act(id, 'local', { type: 'message', content: id });
      await until(async () => (await state(id)) === 'running', `${id} running`);
    };
    await run(a, 'conv1');
    // Out of memory while running: its entry still says running, but no node runs it.
    await a.passivate('conv1', 'too_many_running');
    await run(a, 'conv2');
    await run(b, 'conv3');
    // conv2 and conv3 run: the user is within the cap of 2, and conv2 stays on a.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(a.isLive('conv2')).toBe(true);
    const events = (await stores.log.read('conv2')).items.map((e) => e.event.type);
    expect(events).not.toContain('session_passivated');
  });
});
