import type { JetStreamManager } from '@nats-io/jetstream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { inject } from 'vitest';
import { natsClusterBus, NodeUnreachableError } from '../../src/store/clusterBus.ts';
import { jetStreamEventLog } from '../../src/store/jetStreamEventLog.ts';
import type { NatsConnection } from '../../src/store/index.ts';
import { connectNats } from '../../src/store/natsConnection.ts';
import { uniqueStreamName, uniqueSubjectPrefix, useTestJetStream } from '../support/nats.ts';
import { startTcpProxy, type TcpProxy } from '../support/tcpProxy.ts';
import { until } from '../support/until.ts';
import { message, newConversationId } from './eventLogContract.ts';

/*
 * What is in flight when the connection to NATS drops (issue 28): an append is
 * sent again on the new connection, whatever the old one lost, and stored once;
 * a request between nodes fails at once, to be asked again. The client talks to
 * the run's nats-server through a proxy that loses bytes on purpose, then is cut.
 */

let nc: NatsConnection;
let jsm: JetStreamManager;
useTestJetStream((connected, manager) => ([nc, jsm] = [connected, manager]));

/** A connection through a fresh proxy, and the proxy; both closed when the test finishes. */
async function proxied(): Promise<{ proxy: TcpProxy; client: NatsConnection }> {
  const proxy = await startTcpProxy(Number(new URL(inject('natsUrl')).port));
  const client = await connectNats(proxy.url, { name: 'tether-reconnect-test' });
  onTestFinished(async () => {
    await client.close();
    await proxy.close();
  });
  return { proxy, client };
}

async function freshLogs(client: NatsConnection) {
  const options = { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() };
  const direct = await jetStreamEventLog(nc, options);
  onTestFinished(() => jsm.streams.delete(direct.stream).then(() => undefined));
  return { direct, proxied: await jetStreamEventLog(client, options) };
}

describe('an append in flight when the connection drops', () => {
  it('whose ack was lost is sent again on the new connection: stored once, its first seq, not a duplicate', async () => {
    const { proxy, client } = await proxied();
    const logs = await freshLogs(client);
    const id = newConversationId();
    await logs.proxied.append(message(id, 1), { expectedLastSeq: 0 });
    proxy.drop('toClient');
    const appended = logs.proxied.append(message(id, 2), { expectedLastSeq: 1, msgId: 'client-2' });
    // Stored by the server; its ack is lost with the connection.
    await until(async () => (await logs.direct.lastSeq(id)) === 2, 'the event stored');
    const cutAt = performance.now();
    proxy.cut();
    expect(await appended).toEqual({ seq: 2, duplicate: false });
    // Answered once reconnected (nats.js waits 1 s before dialing the same server again), not after the 5 s timeout.
    expect(performance.now() - cutAt).toBeLessThan(3_000);
    const { items } = await logs.direct.read(id);
    expect(items.map((item) => item.event.data)).toEqual([{ content: 'message 1' }, { content: 'message 2' }]);
  });

  it('that never reached the server is sent again on the new connection and stored', async () => {
    const { proxy, client } = await proxied();
    const logs = await freshLogs(client);
    const id = newConversationId();
    proxy.drop('toServer');
    const appended = logs.proxied.append(message(id, 1), { expectedLastSeq: 0 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await logs.direct.lastSeq(id)).toBe(0);
    proxy.cut();
    expect(await appended).toEqual({ seq: 1, duplicate: false });
    expect((await logs.direct.read(id)).items).toHaveLength(1);
  });

  it("still says duplicate for a caller's msgId stored by an earlier attempt", async () => {
    const { client } = await proxied();
    const logs = await freshLogs(client);
    const id = newConversationId();
    await logs.direct.append(message(id, 1), { expectedLastSeq: 0, msgId: 'client-1' });
    expect(await logs.proxied.append(message(id, 1), { expectedLastSeq: 0, msgId: 'client-1' })).toEqual({
      seq: 1,
      duplicate: true,
    });
  });
});

describe('an append that no stream takes for now (503: its leader moving)', () => {
  it('is sent again every 100 ms until one does, within its timeout', async () => {
    const options = { stream: uniqueStreamName(), subjectPrefix: uniqueSubjectPrefix() };
    const log = await jetStreamEventLog(nc, options);
    onTestFinished(() => jsm.streams.delete(log.stream).then(() => undefined));
    await jsm.streams.delete(log.stream);
    const id = newConversationId();
    const appended = log.append(message(id, 1), { expectedLastSeq: 0 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await jetStreamEventLog(nc, options);
    expect(await appended).toEqual({ seq: 1, duplicate: false });
    expect((await log.read(id)).items).toHaveLength(1);
  });
});

describe('a request between nodes in flight when the connection drops', () => {
  it('fails at once as NodeUnreachableError, to be asked again, instead of waiting out its timeout', async () => {
    const { proxy, client } = await proxied();
    const prefix = uniqueSubjectPrefix();
    let received = 0;
    // The owner holds the request past the drop; its answer would go to the old connection's inbox.
    const stop = natsClusterBus(nc, 'owner', prefix).serve('owner', async () => {
      received += 1;
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      return { ok: true };
    });
    onTestFinished(stop);
    await nc.flush();
    const asked = natsClusterBus(client, 'asker', prefix).request('owner', { op: 'deltas' }, 20_000);
    const failed = expect(asked).rejects.toThrow(/the connection to NATS dropped before the answer came/);
    await until(() => received === 1, 'the owner to get the request');
    const cutAt = performance.now();
    proxy.cut();
    await failed;
    await expect(asked).rejects.toBeInstanceOf(NodeUnreachableError);
    expect(performance.now() - cutAt).toBeLessThan(1_000);
  });
});
