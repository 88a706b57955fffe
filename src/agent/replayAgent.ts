import type { StoredEvent } from '../protocol/index.ts';
import type { Agent, AgentAction, AgentMove, AgentStepInput } from './agent.ts';

type ReplayAction = NonNullable<
  Extract<StoredEvent, { type: 'conversation_created' }>['data']['replay_actions']
>[number];

/** The agent's actions of a recorded trajectory (events as `GET /api/conversations/:id/events` gives them), in order. */
export function trajectoryActions(events: readonly StoredEvent[]): ReplayAction[] {
  return events.flatMap((event): ReplayAction[] => {
    if (event.source !== 'agent') return [];
    if (event.type === 'message') return [{ type: 'message', ...event.data }];
    if (event.type === 'command') return [{ type: 'run', command: event.data.command }];
    if (event.type === 'finish') return [{ type: 'finish', content: event.data.content }];
    return [];
  });
}

/**
 * Replays a recorded trajectory, then continues live. The recorded actions
 * live in the conversation's creation event, and the step to replay is the
 * number of actions the agent already took, so a replay survives restarts and
 * never asks the live agent (an LLM) for a step it has a recording of.
 */
export function replayable(live: Agent): Agent {
  return {
    async step(input: AgentStepInput): Promise<AgentAction> {
      const created = input.history[0];
      const recorded = created?.type === 'conversation_created' ? created.data.replay_actions : undefined;
      if (recorded && recorded.length > 0) {
        const taken = input.history.filter(
          (e) => e.source === 'agent' && (e.type === 'message' || e.type === 'command' || e.type === 'finish'),
        ).length;
        const next = recorded[taken];
        if (next?.type === 'message') {
          const { content, wait_for_response } = next;
          return wait_for_response === false
            ? { type: 'message', content, waitForResponse: false }
            : { type: 'message', content };
        }
        if (next) return next satisfies AgentMove;
      }
      return live.step(input);
    },
  };
}
