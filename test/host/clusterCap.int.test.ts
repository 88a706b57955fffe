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

describe('the per-user running cap across a cluster', () => {
  it("a conversation that starts running on one node sends the user's oldest running one on another node out of memory", async () => {
    const stores = memoryStores();
    const cluster = memoryClusterStore(LEASE);
    const bus = memoryClusterBus();
    const ids = ['conv1', 'conv2'];
    const node = async (nodeId: string) => {
      const manager = memoryHost({
        ...stores,
        ownership: new ClusterOwnership({ nodeId, leaseMs: LEASE, store: cluster, logger: silentLogger }),
        bus,
        // A slow agent: a conversation stays running while the other one starts.
        agentFor: () => scriptedAgent({ delayMs: 2_000 }),
        limits: { maxRunningPerUser: 1 },
        newId: () => ids.shift()!,
      });
      managers.push(manager);
      await manager.start();
      return manager;
    };
    const [a, b] = [await node('a'), await node('b')];
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
});
