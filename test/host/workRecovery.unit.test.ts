// Recovery on a node alone runs once at start: what it could not finish there (a store that did
// not answer) it must try again by itself, or a delete cut off by a crash stays half done for good.
import { describe, expect, it } from 'vitest';
import { soloOwnership } from '../../src/cluster/index.ts';
import { silentLogger } from '../../src/logger.ts';
import { WorkRecovery, type RecoveryHost } from '../../src/host/workRecovery.ts';
import { memoryConversationStore, memoryEventLog, type DeleteRecord } from '../../src/store/index.ts';
import { until } from '../support/until.ts';

const host: RecoveryHost = {
  here: () => false,
  rehydrate: async () => undefined,
  exclusive: (_id, work) => work(),
};

/** A recovery whose delete finishing fails `failures` times first; what it finished, and how often it tried. */
async function setup(failures: number, options: { listingFails?: number } = {}) {
  const conversations = memoryConversationStore();
  const record: DeleteRecord = { conversation_id: 'c'.repeat(32), user: 'local', keep_workspace: false };
  await conversations.beginDelete(record);
  let listingFails = options.listingFails ?? 0;
  const deletions = conversations.deletions.bind(conversations);
  conversations.deletions = async () => {
    if (listingFails-- > 0) throw new Error('the conversations bucket did not answer');
    return deletions();
  };
  let tries = 0;
  let left = failures;
  const recovery = new WorkRecovery(host, {
    conversations,
    log: memoryEventLog(),
    ownership: soloOwnership,
    logger: silentLogger,
    concurrency: 4,
    purge: async () => undefined,
    finishDelete: async (r) => {
      tries++;
      if (left-- > 0) throw new Error('the store is down');
      await conversations.endDelete(r.conversation_id);
    },
    retryDelaysMs: [20, 40],
  });
  const finished = async () => (await deletions()).length === 0;
  return { recovery, finished, tries: () => tries };
}

describe('WorkRecovery', () => {
  it('runs again after a delete it could not finish, with waits, until it finishes it', async () => {
    const { recovery, finished, tries } = await setup(3);
    await recovery.run();
    expect(await finished()).toBe(false);
    await until(finished, 'the delete to be finished by a later run', { timeoutMs: 2_000, everyMs: 5 });
    expect(tries()).toBe(4);
    recovery.stop();
  });

  it('runs again after its listing of deletes failed', async () => {
    const { recovery, finished, tries } = await setup(0, { listingFails: 1 });
    await expect(recovery.run()).rejects.toThrow(/did not answer/);
    await until(finished, 'the delete to be finished by a later run', { timeoutMs: 2_000, everyMs: 5 });
    expect(tries()).toBe(1);
    recovery.stop();
  });

  it('does not run again after a clean run, nor once stopped', async () => {
    const clean = await setup(0);
    await clean.recovery.run();
    await new Promise((r) => setTimeout(r, 100));
    expect(clean.tries()).toBe(1);

    const stopped = await setup(5);
    await stopped.recovery.run();
    stopped.recovery.stop();
    await new Promise((r) => setTimeout(r, 150));
    expect(stopped.tries()).toBe(1);
    expect(await stopped.finished()).toBe(false);
  });
});
