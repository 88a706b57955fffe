import { describe, expect, it } from 'vitest';
import { memoryHost } from '../support/memoryHost.ts';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { ConversationNotFoundError } from '../../src/errors.ts';
import { memoryEventLog, type EventLog } from '../../src/store/index.ts';
import { wrapLog } from '../support/wrapLog.ts';
import { logViolations } from '../properties/logChecks.ts';

/** A memory log that keeps what each conversation's log held when it was purged; `failPurges` purges fail first. */
function recordingLog(failPurges = 0): { log: EventLog; purged: Map<string, StoredEvent[]> } {
  const inner = memoryEventLog();
  const purged = new Map<string, StoredEvent[]>();
  let failures = failPurges;
  const log = wrapLog(inner, {
    purge: async (id) => {
      if (failures-- > 0) throw new Error('the store is down');
      purged.set(
        id,
        (await inner.read(id)).items.map((i) => i.event),
      );
      return inner.purge(id);
    },
  });
  return { log, purged };
}

function setup(failPurges = 0) {
  const { log, purged } = recordingLog(failPurges);
  const runtimes = memoryRuntimeProvider();
  const m = memoryHost({ log, runtimes });
  const idle = async (id: string) => {
    for (let i = 0; i < 500; i++) {
      if ((await m.session(id, 'local')).state === 'awaiting_user_input') return;
      await new Promise((r) => setTimeout(r, 2));
    }
    throw new Error('never idle');
  };
  return { m, log, purged, runtimes, idle };
}

const body = { confirmation_mode: false, max_iterations: 10, secrets: {}, initial_message: 'hello' };
const kinds = (events: readonly StoredEvent[]) =>
  events.map((e) => (e.type === 'agent_state_changed' ? `${e.type} ${e.data.state}` : e.type));

describe('deleting a conversation', () => {
  it('stores session_closed and the stopped state it leads to, which its followers see, before the log is purged', async () => {
    const { m, log, purged, idle } = setup();
    try {
      const { conversation_id: id } = await m.commands.create('local', body);
      await idle(id);
      const followed: LoggedEvent[] = [];
      await m.feed.listen(id, await log.lastSeq(id), { event: (e) => followed.push(e) }).caughtUp;

      await m.commands.delete(id, 'local');

      const stored = purged.get(id)!;
      expect(kinds(stored).slice(-3)).toEqual([
        'agent_state_changed awaiting_user_input',
        'session_closed',
        'agent_state_changed stopped',
      ]);
      const closed = stored.at(-2)!;
      expect(closed).toMatchObject({ source: 'environment', type: 'session_closed', data: { reason: 'deleted' } });
      expect(stored.at(-1)!.cause).toBe(closed.id);
      // Stored as every other fact: the fold takes it, ids stay dense, its state fact follows it.
      expect(logViolations(stored)).toEqual([]);
      expect(followed.map((e) => e.event)).toEqual(stored.slice(-2));
      expect((await log.read(id)).items).toEqual([]);
      expect(m.isLive(id)).toBe(false);
      await expect(m.session(id, 'local')).rejects.toBeInstanceOf(ConversationNotFoundError);
    } finally {
      await m.shutdown();
    }
  });

  it('ends a conversation out of memory from its stored state, without bringing it back or starting anything', async () => {
    const { m, purged, runtimes, idle } = setup();
    try {
      const { conversation_id: id } = await m.commands.create('local', body);
      await idle(id);
      await m.passivate(id, 'idle');
      expect(m.isLive(id)).toBe(false);
      const runtimesBefore = runtimes.created.length;

      await m.commands.delete(id, 'local');

      const stored = purged.get(id)!;
      expect(kinds(stored).slice(-3)).toEqual(['session_passivated', 'session_closed', 'agent_state_changed stopped']);
      expect(kinds(stored)).not.toContain('session_rehydrated');
      expect(logViolations(stored)).toEqual([]);
      expect(runtimes.created).toHaveLength(runtimesBefore);
      expect(m.isLive(id)).toBe(false);
    } finally {
      await m.shutdown();
    }
  });

  it('records a delete before it removes anything: one cut off is gone for its user, and recovery finishes it', async () => {
    const { m, log, purged, idle } = setup(1);
    try {
      const { conversation_id: id } = await m.commands.create('local', body);
      await idle(id);
      await expect(m.commands.delete(id, 'local')).rejects.toThrow(/the store is down/);
      expect(kinds((await log.read(id)).items.map((i) => i.event)).slice(-2)).toEqual([
        'session_closed',
        'agent_state_changed stopped',
      ]);
      // Its index entry went first: its user no longer finds it, nor can delete it again.
      await expect(m.session(id, 'local')).rejects.toBeInstanceOf(ConversationNotFoundError);
      await expect(m.commands.delete(id, 'local')).rejects.toBeInstanceOf(ConversationNotFoundError);

      await m.recover();
      expect(kinds(purged.get(id)!).filter((k) => k === 'session_closed')).toHaveLength(1);
      expect((await log.read(id)).items).toEqual([]);
    } finally {
      await m.shutdown();
    }
  });
});
