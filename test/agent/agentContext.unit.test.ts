import { describe, expect, it } from 'vitest';
import {
  ChatTranscript,
  replayable,
  scriptedAgent,
  toChatMessages,
  type Agent,
  type AgentAction,
} from '../../src/agent/index.ts';
import { StoredEvent } from '../../protocol/index.ts';
import { stepOver } from '../support/agentSteps.ts';

type Draft = Pick<StoredEvent, 'source' | 'type' | 'data'> & { cause?: number };

/** A small seeded generator (mulberry32), so a failing history can be built again from its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A history of `length` events as a session could store them, in any order the
 * agent loop allows and some it does not (outputs late, twice, or for a user's
 * command; messages queued up), so that every branch of the contexts is taken.
 */
function randomHistory(seed: number, length: number, replay = false): StoredEvent[] {
  const next = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const commands: number[] = [];
  const drafts: Draft[] = [
    {
      source: 'user',
      type: 'conversation_created',
      data: {
        user: 'local',
        confirmation_mode: false,
        max_iterations: 10,
        secret_names: [],
        replay,
        ...(next() < 0.5 && { instructions: 'be brief' }),
        ...(replay && {
          replay_actions: [
            { type: 'message', content: 'recorded hello', wait_for_response: false },
            { type: 'run', command: 'echo recorded' },
            { type: 'finish', content: 'recorded done' },
          ],
        }),
      },
    },
  ];
  while (drafts.length < length) {
    const id = drafts.length;
    const kind = pick(['user', 'user', 'run', 'agent', 'agentRun', 'output', 'output', 'state', 'finish', 'usage']);
    if (kind === 'user') drafts.push({ source: 'user', type: 'message', data: { content: pick(['hi', '!ls', '?']) } });
    if (kind === 'run') {
      commands.push(id);
      drafts.push({ source: 'user', type: 'command', data: { command: 'pwd' } });
    }
    if (kind === 'agent') drafts.push({ source: 'agent', type: 'message', data: { content: `answer ${id}` } });
    if (kind === 'agentRun') {
      commands.push(id);
      drafts.push({ source: 'agent', type: 'command', data: { command: `echo ${id}` } });
    }
    if (kind === 'output' && commands.length > 0) {
      const cause = pick(commands);
      drafts.push({
        source: 'environment',
        type: 'command_output',
        cause,
        data: {
          command: `echo ${cause}`,
          exit_code: pick([0, 1, null]),
          output: `out ${id}\n`,
          timed_out: false,
          truncated: false,
        },
      });
    }
    if (kind === 'state')
      drafts.push({
        source: 'environment',
        type: 'agent_state_changed',
        data: { state: pick(['running', 'awaiting_user_input']) },
      });
    if (kind === 'finish') drafts.push({ source: 'agent', type: 'finish', data: { content: 'done' } });
    if (kind === 'usage')
      drafts.push({ source: 'agent', type: 'agent_usage', data: { prompt_tokens: 1, completion_tokens: 1, cost: 0 } });
  }
  return drafts.map((draft, id) =>
    StoredEvent.parse({ v: 1, id, conversation_id: 'c1', ts: '2025-01-01T00:00:00.000Z', ...draft }),
  );
}

/** Steps after every event of one context against a fresh context for each prefix. */
async function incrementalAndFresh(
  agent: Agent,
  history: readonly StoredEvent[],
): Promise<{ incremental: AgentAction[]; fresh: AgentAction[] }> {
  const context = agent.context('c1');
  const incremental: AgentAction[] = [];
  const fresh: AgentAction[] = [];
  for (let n = 0; n < history.length; n++) {
    context.observe(history[n]!);
    incremental.push(await context.step());
    fresh.push(await stepOver(agent, history.slice(0, n + 1)));
  }
  return { incremental, fresh };
}

const SEED = Date.now();
const HISTORIES = 30;

describe(`agent contexts built one event at a time (seed ${SEED})`, () => {
  it('give the scripted agent the same action after every event as a context built from scratch', async () => {
    for (let i = 0; i < HISTORIES; i++) {
      const history = randomHistory(SEED + i, 60);
      const { incremental, fresh } = await incrementalAndFresh(scriptedAgent(), history);
      expect(incremental, `seed ${SEED + i}`).toEqual(fresh);
    }
  });

  it('give a replayed conversation the recorded actions, then the live agent, as a context built from scratch', async () => {
    for (let i = 0; i < HISTORIES; i++) {
      const history = randomHistory(SEED + i, 40, true);
      const { incremental, fresh } = await incrementalAndFresh(replayable(scriptedAgent()), history);
      expect(incremental, `seed ${SEED + i}`).toEqual(fresh);
      // The first step replays the recording.
      expect(incremental[0]).toEqual({ type: 'message', content: 'recorded hello', waitForResponse: false });
    }
  });

  it('keep the chat messages equal to those built from the whole history, after every event', () => {
    for (let i = 0; i < HISTORIES; i++) {
      const history = randomHistory(SEED + i, 60);
      const transcript = new ChatTranscript({ maxOutputChars: 20 });
      history.forEach((event, n) => {
        transcript.observe(event);
        expect([...transcript.messages], `seed ${SEED + i}, event ${n}`).toEqual(
          toChatMessages(history.slice(0, n + 1), { maxOutputChars: 20 }),
        );
      });
    }
  });
});

describe('an agent context', () => {
  it("fills an agent command's tool result when its output comes after other events, and keeps the first output only", () => {
    const history = [
      ...randomHistory(1, 1),
      ...[
        { source: 'agent', type: 'command', data: { command: 'sleep 1' } },
        { source: 'user', type: 'message', data: { content: 'still there?' } },
        {
          source: 'environment',
          type: 'command_output',
          cause: 1,
          data: { command: 'sleep 1', exit_code: 0, output: 'first', timed_out: false, truncated: false },
        },
        {
          source: 'environment',
          type: 'command_output',
          cause: 1,
          data: { command: 'sleep 1', exit_code: 0, output: 'second', timed_out: false, truncated: false },
        },
      ].map((draft, n) =>
        StoredEvent.parse({ v: 1, id: n + 1, conversation_id: 'c1', ts: '2025-01-01T00:00:00.000Z', ...draft }),
      ),
    ];
    const transcript = new ChatTranscript();
    for (const event of history) transcript.observe(event);
    expect(transcript.messages.slice(1)).toEqual([
      expect.objectContaining({ role: 'assistant', tool_calls: [expect.objectContaining({ id: 'call_1' })] }),
      { role: 'tool', tool_call_id: 'call_1', content: 'Exit code: 0\nOutput:\nfirst' },
      { role: 'user', content: 'still there?' },
    ]);
  });
});
