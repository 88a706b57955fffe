import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { ClusterOwnership } from '../../src/cluster/index.ts';
import { memoryClusterStore, type ClusterStore } from '../../src/store/index.ts';

const LEASE = 200;
const started: ClusterOwnership[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((o) => o.stop({ leave: false })));
});

async function node(
  store: ClusterStore,
  nodeId: string,
  events: { lapsed?: () => void; recover?: (why: string) => void } = {},
) {
  const ownership = new ClusterOwnership({ nodeId, leaseMs: LEASE, store, logger: silentLogger });
  await ownership.start({
    lapsed: events.lapsed ?? (() => undefined),
    recover: events.recover ?? (() => undefined),
    liveSessions: () => 0,
  });
  started.push(ownership);
  return ownership;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('ownership in a cluster', () => {
  it('one node claims a conversation; another is sent to it while its heartbeat lasts, and takes it over once it lapses', async () => {
    const store = memoryClusterStore(LEASE);
    const recoveries: string[] = [];
    const a = await node(store, 'a');
    const b = await node(store, 'b', { recover: (why) => recoveries.push(why) });
    await a.claimNew('conv1');
    expect(await a.route('conv1')).toEqual({ local: true });
    expect(await b.route('conv1')).toEqual({ local: false, node: 'a' });
    expect((await store.owner('conv1'))?.record).toEqual({ node_id: 'a', generation: 1 });

    await a.stop({ leave: false }); // a stops renewing: frozen or killed
    expect(a.leaseValid()).toBe(false);
    await sleep(LEASE * 1.5);
    expect(recoveries).toEqual(['node a gone']);
    expect(await b.route('conv1')).toEqual({ local: true });
    expect((await store.owner('conv1'))?.record).toEqual({ node_id: 'b', generation: 2 });
    expect(b.takeovers).toBe(1);
  });

  it("two nodes racing for a dead node's conversation: exactly one wins", async () => {
    const store = memoryClusterStore(LEASE);
    const dead = await node(store, 'dead');
    await dead.claimNew('conv1');
    await dead.stop({ leave: false });
    await sleep(LEASE * 1.2);
    const [b, c] = await Promise.all([node(store, 'b'), node(store, 'c')]);
    const routes = await Promise.all([b.route('conv1'), c.route('conv1')]);
    expect(routes.filter((r) => r.local)).toHaveLength(1);
    expect(b.takeovers + c.takeovers).toBe(1);
  });

  it('a node whose heartbeat cannot be renewed stops trusting its lease within one lease, and says so once', async () => {
    const store = memoryClusterStore(LEASE);
    let failing = false;
    const flaky: ClusterStore = {
      ...store,
      beat: (beat) => (failing ? Promise.reject(new Error('NATS away')) : store.beat(beat)),
    };
    let lapses = 0;
    const recoveries: string[] = [];
    const a = await node(flaky, 'a', { lapsed: () => (lapses += 1), recover: (why) => recoveries.push(why) });
    await a.claimNew('conv1');
    failing = true;
    await sleep(LEASE * 1.2);
    expect(a.leaseValid()).toBe(false);
    expect(lapses).toBe(1);
    await expect(a.route('conv1')).rejects.toThrow(/lease/);
    failing = false;
    await sleep(LEASE / 2);
    expect(a.leaseValid()).toBe(true);
    expect(recoveries).toContain('lease renewed');
  });

  it('a listing of the nodes that hangs delays no heartbeat: the lease holds, and a later listing sees a node gone', async () => {
    const store = memoryClusterStore(LEASE);
    let hanging = false;
    const stuck: ClusterStore = {
      ...store,
      // Seen on a loaded cluster: the key listing of the heartbeat bucket did not end for many seconds.
      nodes: () => (hanging ? new Promise<string[]>(() => undefined) : store.nodes()),
    };
    let lapses = 0;
    const recoveries: string[] = [];
    const a = await node(stuck, 'a', { lapsed: () => (lapses += 1), recover: (why) => recoveries.push(why) });
    const b = await node(store, 'b');
    await a.claimNew('conv1');
    await sleep(LEASE / 2); // a has listed b
    hanging = true;
    await b.stop({ leave: false });
    await sleep(LEASE * 3);
    expect(lapses).toBe(0);
    expect(a.leaseValid()).toBe(true);
    expect(await store.alive('a')).toBe(true);
    expect(await a.route('conv1')).toEqual({ local: true });
    hanging = false;
    await sleep(LEASE * 2);
    expect(recoveries).toEqual(['node b gone']);
  });

  it('a drained node leaves at once: its released conversations go to the next node that asks', async () => {
    const store = memoryClusterStore(LEASE);
    const a = await node(store, 'a');
    const b = await node(store, 'b');
    await a.claimNew('conv1');
    await a.release('conv1');
    await a.stop({ leave: true });
    expect(await store.nodes()).toEqual(['b']);
    expect(await b.route('conv1')).toEqual({ local: true });
    expect(b.takeovers).toBe(0);
  });
});
