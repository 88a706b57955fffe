import { describe, expect, it } from 'vitest';
import { memoryHost } from '../support/memoryHost.ts';
import type { Agent, AgentAction } from '../../src/agent/index.ts';
import type { StatusFrame, StoredEvent } from '../../protocol/index.ts';
import { TOO_MANY_CONVERSATIONS } from '../../src/host/index.ts';
import { memoryEventLog } from '../../src/store/index.ts';
import { until } from '../support/until.ts';

/** An agent that keeps thinking: a step ends only when its session stops it. */
const thinkingAgent: Agent = {
  context: () => ({
    observe: () => {},
    step: (input) =>
      new Promise<AgentAction>((_, reject) =>
        input?.signal?.addEventListener('abort', () => reject(new Error('aborted'))),
      ),
  }),
};

describe('too many running conversations for one user', () => {
  it('tells the clients of the oldest that it left memory (not that it was paused), and it comes back running when next used', async () => {
    const log = memoryEventLog();
    const m = memoryHost({ log, agentFor: () => thinkingAgent, limits: { maxRunningPerUser: 1 } });
    const body = { confirmation_mode: false, max_iterations: 10, secrets: {}, initial_message: 'work' };
    const events = async (id: string): Promise<StoredEvent[]> => (await log.read(id)).items.map((i) => i.event);
    try {
      const { conversation_id: oldest } = await m.commands.create('local', body);
      const frames: StatusFrame[] = [];
      m.feed.listen(oldest, 0, { event: () => {}, status: (frame) => frames.push(frame) });
      await until(async () => (await m.session(oldest, 'local')).state === 'running', 'the first conversation runs');

      await m.commands.create('local', body);
      await until(() => !m.isLive(oldest), 'the first conversation left memory');
      const told = frames.filter((f) => f.id === TOO_MANY_CONVERSATIONS.id);
      expect(told).toHaveLength(1);
      expect(told[0]!.message).toMatch(/left memory/);
      expect(told[0]!.message).toMatch(/next action brings it back where it was/);
      expect(told[0]!.message).not.toMatch(/pause/i);
      expect((await events(oldest)).at(-1)).toMatchObject({
        type: 'session_passivated',
        data: { reason: 'too_many_running', state: 'running' },
      });

      // A connection that only listens leaves it out of memory, and sees it running.
      expect((await m.commands.connect(oldest, 'local')).state).toBe('running');
      expect(m.isLive(oldest)).toBe(false);
      expect((await events(oldest)).at(-1)?.type).toBe('session_passivated');
      // What the message promises: its next action brings it back where it was, still running its task.
      await m.commands.act(oldest, 'local', { type: 'message', content: 'and then?' });
      expect(m.isLive(oldest)).toBe(true);
      const after = await events(oldest);
      expect(after.some((e) => e.type === 'session_rehydrated')).toBe(true);
      expect(after.flatMap((e) => (e.type === 'agent_state_changed' ? [e.data.state] : []))).not.toContain('paused');
    } finally {
      await m.shutdown();
    }
  });
});
