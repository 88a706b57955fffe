import { describe, expect, inject, onTestFinished, test } from 'vitest';
import { createInbox, type NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '../../src/store/natsConnection.ts';

/** The socket writes a connection makes (nats.js's transport: its internals, as flushOncePerTurn reaches them). */
function countWrites(nc: NatsConnection): () => number {
  const transport = (nc as unknown as { protocol: { transport: { send(frame: Uint8Array): void } } }).protocol
    .transport;
  const send = transport.send.bind(transport);
  let writes = 0;
  transport.send = (frame) => {
    writes += 1;
    send(frame);
  };
  return () => writes;
}

describe('what a connection sends in one turn of the event loop', () => {
  test('leaves in one write, in order', async () => {
    const url = inject('natsUrl');
    const [writer, reader] = await Promise.all([
      connectNats(url, { name: 'turn-writer' }),
      connectNats(url, { name: 'turn-reader' }),
    ]);
    onTestFinished(async () => {
      await Promise.all([writer.close(), reader.close()]);
    });
    await writer.flush();
    const subject = createInbox();
    const sub = reader.subscribe(subject, { max: 200 });
    await reader.flush();
    const writes = countWrites(writer);
    // As appends go: each publish after an await, nats.js would write after each microtask run.
    for (let i = 0; i < 200; i++) {
      writer.publish(subject, String(i));
      await Promise.resolve();
    }
    const got: string[] = [];
    for await (const m of sub) got.push(m.string());
    expect(got).toEqual([...Array(200).keys()].map(String));
    expect(writes()).toBe(1);
  });

  test('is written before the connection closes', async () => {
    const url = inject('natsUrl');
    const [writer, reader] = await Promise.all([
      connectNats(url, { name: 'turn-writer' }),
      connectNats(url, { name: 'turn-reader' }),
    ]);
    onTestFinished(() => reader.close());
    await writer.flush();
    const subject = createInbox();
    const sub = reader.subscribe(subject, { max: 1 });
    await reader.flush();
    writer.publish(subject, 'last words');
    await writer.close();
    const got = await Promise.race([
      (async () => {
        for await (const m of sub) return m.string();
      })(),
      new Promise((resolve) => setTimeout(() => resolve('nothing within 2 s'), 2_000)),
    ]);
    expect(got).toBe('last words');
  });

  test('leaves as nats.js writes it when asked (one write per microtask run)', async () => {
    const nc = await connectNats(inject('natsUrl'), { name: 'turn-plain', writePerTurn: false });
    onTestFinished(() => nc.close());
    await nc.flush();
    const writes = countWrites(nc);
    const subject = createInbox();
    for (let i = 0; i < 3; i++) {
      nc.publish(subject, String(i));
      await Promise.resolve();
    }
    await nc.flush();
    // Three publishes, then the flush's PING.
    expect(writes()).toBe(4);
  });
});
