import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { ClusterOwnership } from '../../src/cluster/index.ts';
import { SessionUnavailableError } from '../../src/errors.ts';
import { type NodeHost } from '../../src/host/index.ts';
import { memoryClusterBus, memoryClusterStore, memoryStores } from '../../src/store/index.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { memoryHost } from '../support/memoryHost.ts';
import { until } from '../support/until.ts';

const LEASE = 1_000;
const managers: NodeHost[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((m) => m.shutdown()));
});

describe('a node whose lease may have lapsed', () => {
  it('appends nothing and starts no effect, drops its sessions, and takes back its unfinished ones once its heartbeat is renewed', async () => {
    // The node's monotonic clock, moved by hand: a jump is a freeze the node wakes from.
    let now = 0;
    const clusterStore = memoryClusterStore(LEASE, () => now);
    const ownership = new ClusterOwnership({
      nodeId: 'a',
      leaseMs: LEASE,
      store: clusterStore,
      logger: silentLogger,
      now: () => now,
    });
    const stores = memoryStores();
    const manager = memoryHost({ ...stores, ownership, bus: memoryClusterBus(), newId: () => 'conv1' });
    managers.push(manager);
    await manager.start();
    await manager.commands.create('local', { confirmation_mode: false, max_iterations: 100, secrets: {} });
    const stored = async () => (await stores.log.read('conv1')).items;
    await until(async () => endsAwaiting(await stored()), 'the conversation to be ready');
    const session = await manager.session('conv1', 'local');
    const before = await stored();

    now += 2 * LEASE; // frozen for two leases: another node may own conv1 by now
    expect(ownership.leaseValid()).toBe(false);
    await expect(session.act({ type: 'message', content: 'late' })).rejects.toThrow(SessionUnavailableError);
    expect(await stored()).toEqual(before);
    expect(session.released).toBe(true);

    // The next heartbeat (a quarter lease later, on the real clock) says the lease lapsed: the session is dropped,
    // then the renewed node finds conv1 still its own and unfinished-free: nothing comes back, nothing is written.
    await until(() => ownership.leaseValid(), 'the renewed lease');
    expect(manager.isLive('conv1')).toBe(false);
    expect(await stored()).toEqual(before);
    // Asked again, it is this node's to run: it comes back and answers.
    await manager.commands.act('conv1', 'local', { type: 'message', content: 'back' });
    await until(async () => endsAwaiting(await stored()), 'the answer');
    expect((await stored()).map((e) => e.event.id)).toEqual((await stored()).map((_, i) => i));
  });
});
