import { describe, expect, it } from 'vitest';
import { ClusterRouter, NotOwnerError, type Ownership } from '../../src/cluster/index.ts';
import type { ClusterBus } from '../../src/store/index.ts';

/** A node `a` of a cluster where node `b` owns every conversation; its bus answers as `answer` says. */
function routerOn(answer: (call: number, body: { op: string }) => Promise<unknown>) {
  const calls: Array<{ at: number; body: { op: string; client_id?: string } }> = [];
  const storedElsewhere: Array<[string, number]> = [];
  const bus = {
    request: (_node: string, body: { op: string }) => {
      calls.push({ at: performance.now(), body });
      return answer(calls.length, body);
    },
  } as unknown as ClusterBus;
  const ownership = { nodeId: 'a', clustered: true } as unknown as Ownership;
  const notHere = async (): Promise<never> => {
    throw new NotOwnerError('c1', 'b');
  };
  const host = {
    isLive: () => false,
    deltasHere: () => null,
    actHere: notHere,
    deleteHere: notHere,
    passivate: notHere,
    storedElsewhere: (id: string, seq: number) => void storedElsewhere.push([id, seq]),
  };
  return { router: new ClusterRouter(host, { ownership, bus }), calls, storedElsewhere };
}

const never = () => new Promise<never>(() => {});
const request = (op: 'act' | 'delete') => () =>
  op === 'act'
    ? ({ op, conversation_id: 'c1', user: 'u', action: { type: 'message', content: 'hi' }, client_id: 'k1' } as const)
    : ({ op, conversation_id: 'c1', user: 'u', keep_workspace: false } as const);

describe('a forwarded action nobody answers', () => {
  it('is sent again, with its id, a second after the first, and the first answer is taken', async () => {
    const { router, calls } = routerOn((call) => (call === 1 ? never() : Promise.resolve({ ok: true, seq: 9 })));
    const t0 = performance.now();
    const result = await router.routed('c1', request('act'), () => Promise.reject(new NotOwnerError('c1', 'b')));
    expect(result).toEqual({ seq: 9, duplicate: false });
    expect(calls.map((c) => c.body.client_id)).toEqual(['k1', 'k1']);
    expect(calls[1]!.at - t0).toBeGreaterThanOrEqual(950);
    expect(calls[1]!.at - t0).toBeLessThan(2_000);
  });

  it('is sent once when answered in time; other requests are never sent twice', async () => {
    const answered = routerOn(() => Promise.resolve({ ok: true, seq: 3 }));
    await answered.router.routed('c1', request('act'), () => Promise.reject(new NotOwnerError('c1', 'b')));
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(answered.calls).toHaveLength(1);

    const deleting = routerOn((call) => (call === 1 ? never() : Promise.resolve({ ok: true })));
    void deleting.router.routed('c1', request('delete'), () => Promise.reject(new NotOwnerError('c1', 'b')));
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(deleting.calls).toHaveLength(1);
  });
});

describe('an action its owner stored', () => {
  it('is announced to this node with its seq, so that the live feed looks for it; a delete is not', async () => {
    const acting = routerOn(() => Promise.resolve({ ok: true, seq: 7 }));
    await acting.router.routed('c1', request('act'), () => Promise.reject(new NotOwnerError('c1', 'b')));
    expect(acting.storedElsewhere).toEqual([['c1', 7]]);

    const deleting = routerOn(() => Promise.resolve({ ok: true }));
    await deleting.router.routed('c1', request('delete'), () => Promise.reject(new NotOwnerError('c1', 'b')));
    expect(deleting.storedElsewhere).toEqual([]);
  });
});
