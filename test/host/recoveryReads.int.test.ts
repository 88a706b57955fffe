// Recovery after a restart reads no log of an idle conversation: it finds unfinished work
// from the work markers, on real NATS stores, with a log that counts every read.
import { Kvm } from '@nats-io/kv';
import { jetstreamManager } from '@nats-io/jetstream';
import pLimit from 'p-limit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scriptedAgent, type Agent } from '../../src/agent/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import type { NodeHost } from '../../src/host/index.ts';
import { jetStreamStores, type NatsConnection, type Stores } from '../../src/store/index.ts';
import { CountingLog } from '../support/countingLog.ts';
import { connectTestNats, uniqueBucketName, uniqueStreamName, uniqueSubjectPrefix } from '../support/nats.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

const IDLE = 1000;
const defaults = { confirmation_mode: false, max_iterations: 10, secrets: {} };
const names = {
  stream: uniqueStreamName(),
  subjectPrefix: uniqueSubjectPrefix(),
  conversationBucket: uniqueBucketName(),
  snapshotBucket: uniqueBucketName(),
};

let nc: NatsConnection;
let stores: Stores;
beforeAll(async () => {
  nc = await connectTestNats();
  stores = await jetStreamStores(nc, names);
});
afterAll(async () => {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(names.stream);
  for (const bucket of [names.conversationBucket, names.snapshotBucket])
    await (await new Kvm(nc).open(bucket)).destroy();
  await nc.close();
});

/** An agent whose step never answers: its conversation stays running until its process dies. */
const hanging: Agent = { context: () => ({ observe: () => {}, step: () => new Promise(() => {}) }) };

function manager(log: Stores['log'], agentFor: (id: string) => Agent, newId?: () => string): NodeHost {
  return memoryHost({
    ...stores,
    log,
    runtimes: memoryRuntimeProvider(),
    agentFor,
    ...(newId && { newId }),
  });
}

describe('recovery after a restart', () => {
  it(`reads no log of any of ${IDLE} idle conversations, after a crash and after a shutdown, and brings back the busy one`, async () => {
    let n = 0;
    const first = manager(
      stores.log,
      (id) => (id === 'busy' ? hanging : scriptedAgent()),
      () => (n === 0 ? 'busy' : `idle${String(n)}`),
    );
    const idle: string[] = [];
    const userOf = new Map<string, string>();
    const create = pLimit(32);
    await Promise.all(
      Array.from({ length: IDLE }, (_, i) =>
        create(async () => {
          n = i + 1;
          const { conversation_id: id } = await first.commands.create(`user${i % 7}`, defaults);
          idle.push(id);
          // In the order they were answered, which is not the order they were asked in.
          userOf.set(id, `user${i % 7}`);
        }),
      ),
    );
    n = 0;
    const { conversation_id: busy } = await first.commands.create('user0', {
      ...defaults,
      initial_message: 'think forever',
    });
    expect(busy).toBe('busy');
    const sessions = await Promise.all(idle.map((id) => first.session(id, userOf.get(id)!)));
    await until(() => sessions.every((s) => s.state === 'awaiting_user_input'), 'every idle conversation settled', {
      timeoutMs: 60_000,
    });
    const busySession = await first.session(busy, 'user0');
    await until(() => busySession.state === 'running', 'the busy conversation running', { timeoutMs: 60_000 });
    // The index is written before each caller is answered, but the last steps here were the runtime's own: wait for them.
    await until(async () => {
      const markers = await stores.conversations.markers();
      return markers.length === IDLE + 1 && markers.every((m) => m.unsettled === (m.conversation_id === busy));
    }, 'every idle conversation settled in the index');

    // The first process "crashes": every conversation is still in memory there, one of them busy.
    const afterCrash = new CountingLog(stores.log);
    const second = manager(afterCrash, () => scriptedAgent());
    expect(await second.recover()).toBe(1);
    expect(idle.filter((id) => afterCrash.callsFor(id).length > 0)).toEqual([]);
    expect(afterCrash.callsFor(busy)).toContain('last');
    expect(second.isLive(busy)).toBe(true);
    const back = await second.session(busy, 'user0');
    await until(() => back.state === 'awaiting_user_input', 'the busy conversation finishing its step', {
      timeoutMs: 60_000,
    });
    // The index no longer says the idle ones are in memory (the process that held them is gone).
    const page = await second.queries.list('user3', { limit: 1000 });
    expect(page.items.length).toBeGreaterThan(100);
    expect(page.items.filter((c) => c.in_memory || c.state !== 'awaiting_user_input')).toEqual([]);

    // A clean shutdown and a restart: nothing to recover, no log read at all.
    await second.shutdown();
    const afterShutdown = new CountingLog(stores.log);
    const third = manager(afterShutdown, () => scriptedAgent());
    expect(await third.recover()).toBe(0);
    expect(afterShutdown.conversationsRead).toEqual([]);
    // A list page reads the log once per item it answers (its last sequence), nothing else.
    const listed = await third.queries.list('user0', { limit: 10 });
    expect(listed.items).toHaveLength(10);
    expect(afterShutdown.conversationsRead.sort()).toEqual(listed.items.map((c) => c.conversation_id).sort());
    expect(listed.items.every((c) => afterShutdown.callsFor(c.conversation_id).join() === 'lastSeq')).toBe(true);
    await third.shutdown();
  }, 120_000);
});
