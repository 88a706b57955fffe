import type { StoredEvent } from '../../protocol/index.ts';
import type { Agent, AgentContext, AgentMove } from './agent.ts';

type ReplayAction = NonNullable<
  Extract<StoredEvent, { type: 'conversation_created' }>['data']['replay_actions']
>[number];

/** The agent's actions of a recorded trajectory (events as `GET /api/conversations/:id/events` gives them), in order. */
export function trajectoryActions(events: readonly StoredEvent[]): ReplayAction[] {
  return events.flatMap((event): ReplayAction[] => {
    if (event.source !== 'agent') return [];
    if (event.type === 'message') {
      const { content, wait_for_response } = event.data;
      return [{ type: 'message', content, ...(wait_for_response === false && { wait_for_response }) }];
    }
    if (event.type === 'command') return [{ type: 'run', command: event.data.command }];
    if (event.type === 'finish') return [{ type: 'finish', content: event.data.content }];
    return [];
  });
}

/**
 * Replays a recorded trajectory, then continues live. The recorded actions
 * live in the conversation's creation event, and the step to replay is the
 * number of actions the agent already took, so a replay survives restarts and
 * never asks the live agent (an LLM) for a step it has a recording of. The
 * live agent observes every event too, so it takes over knowing the whole
 * conversation. A fork of a replay stops replaying: it goes on live.
 */
export function replayable(live: Agent): Agent {
  return {
    context(conversationId: string): AgentContext {
      const inner = live.context(conversationId);
      let first = true;
      let recorded: readonly ReplayAction[] = [];
      let taken = 0;
      return {
        observe(event) {
          if (first && event.type === 'conversation_created') recorded = event.data.replay_actions ?? [];
          first = false;
          // A fork goes on live from where it was cut: the recording is the parent's.
          if (event.type === 'conversation_forked') recorded = [];
          if (
            event.source === 'agent' &&
            (event.type === 'message' || event.type === 'command' || event.type === 'finish')
          )
            taken += 1;
          // Played out: the recording is not kept.
          if (taken >= recorded.length) recorded = [];
          inner.observe(event);
        },
        step(input) {
          const next = recorded[taken];
          if (next?.type === 'message') {
            const { content, wait_for_response } = next;
            return Promise.resolve(
              wait_for_response === false
                ? { type: 'message', content, waitForResponse: false }
                : { type: 'message', content },
            );
          }
          if (next) return Promise.resolve(next satisfies AgentMove);
          return inner.step(input);
        },
      };
    },
  };
}
