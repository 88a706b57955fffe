import { describe, expect, it } from 'vitest';
import { natsClusterBus, NodeUnreachableError } from '../../src/store/clusterBus.ts';
import type { NatsConnection } from '../../src/store/index.ts';
import { uniqueSubjectPrefix, useTestNats } from '../support/nats.ts';

/*
 * Requests between nodes name the node they come from; one that names none
 * (a program that is not a Tether node) is answered NOT_A_NODE and never
 * reaches the handler (issue 27).
 */

let nc: NatsConnection;
useTestNats((c) => (nc = c));

describe('the cluster bus on NATS', () => {
  it('carries the asking node and answers it; a request that names no node never reaches the handler', async () => {
    const prefix = uniqueSubjectPrefix();
    const seen: unknown[] = [];
    const stop = natsClusterBus(nc, 'node-b', prefix).serve('node-b', async (request) => {
      seen.push(request);
      return { ok: true };
    });
    try {
      await nc.flush();
      const answer = await natsClusterBus(nc, 'node-a', prefix).request('node-b', { op: 'deltas' }, 2_000);
      expect(answer).toEqual({ ok: true });
      expect(seen).toEqual([{ op: 'deltas' }]);

      const subject = `${prefix}.${Buffer.from('node-b').toString('base64url')}`;
      const raw = await nc.request(subject, JSON.stringify({ op: 'deltas' }), { timeout: 2_000 });
      expect(raw.json()).toMatchObject({ error: { code: 'NOT_A_NODE' } });
      expect(seen).toHaveLength(1);
    } finally {
      await stop();
    }
  });

  it('says a node that nobody serves is unreachable', async () => {
    const bus = natsClusterBus(nc, 'node-a', uniqueSubjectPrefix());
    await expect(bus.request('gone', {}, 500)).rejects.toThrow(NodeUnreachableError);
  });
});
