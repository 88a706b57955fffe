import { errors } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';
import { describe, expect, it, vi } from 'vitest';
import { retryingKv } from '../../src/store/kvRetry.ts';

/** A bucket whose methods fail with `failures` in turn, then answer `ok`; it counts the calls. */
function flakyKv(failures: Error[]) {
  const calls: string[] = [];
  const answer = (name: string) => async () => {
    calls.push(name);
    const failure = failures.shift();
    if (failure) throw failure;
    return 'ok';
  };
  const kv = {
    get: answer('get'),
    put: answer('put'),
    update: answer('update'),
    delete: answer('delete'),
    bucket: 'b',
  };
  return { kv: retryingKv(kv as unknown as KV), calls };
}

/** What nats.js throws when nobody answers a JetStream request (its class is not exported). */
const notEnabled = () => Object.assign(new Error('jetstream is not enabled'), { name: 'JetStreamNotEnabled' });
const dropped = () => new errors.RequestError('the connection to NATS dropped before the answer came');

describe('retryingKv', () => {
  it('tries a write again while no stream leader answers, then gives its answer', async () => {
    const { kv, calls } = flakyKv([notEnabled(), new errors.NoRespondersError('x')]);
    expect(await kv.put('k', 'v')).toBe('ok');
    expect(calls).toEqual(['put', 'put', 'put']);
  });

  it('asks a read or a plain put again after a dropped connection, never a write that expects a revision', async () => {
    const read = flakyKv([dropped()]);
    expect(await read.kv.get('k')).toBe('ok');
    expect(read.calls).toEqual(['get', 'get']);

    const update = flakyKv([dropped()]);
    await expect(update.kv.update('k', 'v', 3)).rejects.toThrow(/dropped/);
    expect(update.calls).toEqual(['update']);

    const compareDelete = flakyKv([dropped()]);
    await expect(compareDelete.kv.delete('k', { previousSeq: 3 })).rejects.toThrow(/dropped/);
    expect(compareDelete.calls).toEqual(['delete']);
  });

  it('makes a read or a plain put again after a timeout, never a write that expects a revision', async () => {
    const timedOut = flakyKv([new errors.TimeoutError()]);
    expect(await timedOut.kv.put('k', 'v')).toBe('ok');
    expect(timedOut.calls).toEqual(['put', 'put']);

    const update = flakyKv([new errors.TimeoutError()]);
    await expect(update.kv.update('k', 'v', 3)).rejects.toBeInstanceOf(errors.TimeoutError);
    expect(update.calls).toEqual(['update']);
  });

  it('makes a plain put again beside the first when it has no answer for half a second, and takes the first answer', async () => {
    const calls: number[] = [];
    const kv = retryingKv({
      put: () => {
        calls.push(Date.now());
        // The first is never answered (it reached a stream as its leader moved); the second is.
        return calls.length === 1 ? new Promise(() => {}) : Promise.resolve(7);
      },
      update: () => new Promise(() => {}),
    } as unknown as KV);
    vi.useFakeTimers();
    try {
      const put = kv.put('k', 'v');
      await vi.advanceTimersByTimeAsync(499);
      expect(calls).toHaveLength(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(await put).toBe(7);
      expect(calls).toHaveLength(2);
      // A write that expects a revision waits for its own answer alone.
      void kv.update('k', 'v', 3);
      await vi.advanceTimersByTimeAsync(5_000);
      expect(calls).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it('gives up after 3 s of refusals', async () => {
    vi.useFakeTimers();
    try {
      const refusing = flakyKv(Array.from({ length: 100 }, () => notEnabled()));
      const started = Date.now();
      const given = expect(refusing.kv.get('k')).rejects.toThrow(/not enabled/);
      await vi.advanceTimersByTimeAsync(5_000);
      await given;
      // At 0, 100, ... 3,000 ms: 31 tries, then the refusal.
      expect(refusing.calls).toHaveLength(31);
      expect(Date.now() - started).toBe(5_000);
    } finally {
      vi.useRealTimers();
    }
  });

  it('leaves other members alone', () => {
    expect((flakyKv([]).kv as unknown as { bucket: string }).bucket).toBe('b');
  });
});
