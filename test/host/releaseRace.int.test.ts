import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { ClusterOwnership } from '../../src/cluster/index.ts';
import { type NodeHost } from '../../src/host/index.ts';
import {
  memoryClusterBus,
  memoryClusterStore,
  memoryStores,
  type ClusterBus,
  type ClusterStore,
  type Stores,
} from '../../src/store/index.ts';
import { endsAwaiting, repliesTo } from '../support/logQueries.ts';
import { memoryHost } from '../support/memoryHost.ts';
import { until } from '../support/until.ts';

const LEASE = 1_000;
/**
 * How long the held release waits for a load of the same conversation to get
 * ahead of it. A load that waits for the release (as it must) never comes
 * first, so there is no event to wait for: the bound lets the release go on.
 */
const RACE_WINDOW_MS = 200;
const managers: NodeHost[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((m) => m.shutdown()));
});

interface Cluster {
  store: ClusterStore;
  bus: ClusterBus;
  stores: Stores;
  /** The nodes' monotonic clock, moved by hand. */
  now: { ms: number };
}

async function node(cluster: Cluster, nodeId: string, store = cluster.store) {
  const ownership = new ClusterOwnership({
    nodeId,
    leaseMs: LEASE,
    store,
    logger: silentLogger,
    now: () => cluster.now.ms,
  });
  const manager = memoryHost({ ...cluster.stores, ownership, bus: cluster.bus, newId: () => 'conv1' });
  managers.push(manager);
  await manager.start();
  return { ownership, manager };
}

/** The cluster store with its owner-record deletes held until `open()`; `releasing` resolves when one is asked for. */
function holdingReleases(store: ClusterStore) {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  let asked!: () => void;
  const releasing = new Promise<void>((resolve) => (asked = resolve));
  const held: ClusterStore = {
    ...store,
    release: async (id, revision) => {
      asked();
      await opened;
      return store.release(id, revision);
    },
  };
  return { store: held, releasing, open };
}

describe('a node that gives up an idle conversation while a request for it comes in', () => {
  it('keeps it owned on record while it holds it in memory, so another node forwards to it instead of running it too', async () => {
    const now = { ms: 0 };
    const cluster: Cluster = {
      store: memoryClusterStore(LEASE, () => now.ms),
      bus: memoryClusterBus(),
      stores: memoryStores(),
      now,
    };
    const stored = async () => (await cluster.stores.log.read('conv1')).items;

    // Node d creates conv1 and dies with it in memory, idle: a work marker, nothing to finish.
    const d = await node(cluster, 'd');
    await d.manager.commands.create('local', { confirmation_mode: false, max_iterations: 100, secrets: {} });
    await until(async () => endsAwaiting(await stored()), 'conv1 to be ready');
    await d.ownership.stop({ leave: false });
    now.ms += 2 * LEASE;

    // Node a recovers d's conversations: it takes conv1 over, finds it idle and gives it up again,
    // and a request for conv1 on node a meets that release.
    const held = holdingReleases(cluster.store);
    const a = await node(cluster, 'a', held.store);
    const recovering = a.manager.recover();
    await held.releasing;
    const loading = a.manager.session('conv1', 'local');
    await Promise.race([loading, new Promise((resolve) => setTimeout(resolve, RACE_WINDOW_MS))]);
    held.open();
    await recovering;
    await loading;

    expect(a.manager.isLive('conv1')).toBe(true);
    expect((await cluster.store.owner('conv1'))?.record.node_id).toBe('a');
    // Node b, asked for conv1, finds node a its owner and forwards: one node runs it.
    const b = await node(cluster, 'b');
    await b.manager.commands.act('conv1', 'local', { type: 'message', content: 'through b' });
    await until(async () => repliesTo(await stored(), 'through b').length === 1, 'the answer');
    expect(b.manager.isLive('conv1')).toBe(false);
    const log = await stored();
    expect(log.map((e) => e.event.id)).toEqual(log.map((_, i) => i));
  });
});
