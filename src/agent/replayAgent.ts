import type { EventOf, StoredEvent } from '../../protocol/index.ts';
import type { Agent, AgentContext, AgentMove, AgentToolCall } from './agent.ts';

type ReplayAction = NonNullable<
  Extract<StoredEvent, { type: 'conversation_created' }>['data']['replay_actions']
>[number];

/** The agent's actions of a recorded trajectory (events as `GET /api/conversations/:id/events` gives them), in order. */
export function trajectoryActions(events: readonly StoredEvent[]): ReplayAction[] {
  const actions: ReplayAction[] = [];
  let reply: string | null = null;
  for (const event of events) {
    if (event.source !== 'agent') continue;
    const key = replyOf(event);
    const callId = 'call_id' in event.data && event.data.call_id !== undefined ? { call_id: event.data.call_id } : {};
    if (event.type === 'message') {
      const { content, wait_for_response } = event.data;
      actions.push({ type: 'message', content, ...(wait_for_response === false && { wait_for_response }), ...callId });
    } else if (event.type === 'finish') actions.push({ type: 'finish', content: event.data.content, ...callId });
    else if (event.type === 'command' && event.data.call_id === undefined) {
      // A scripted or replayed agent's command: its recorded rating goes with it.
      const risk = event.data.security_risk;
      const rated = risk !== undefined && risk !== 'UNKNOWN' ? { security_risk: risk } : {};
      actions.push({ type: 'run', command: event.data.command, ...rated });
    } else if (event.type === 'command' || event.type === 'tool_call') {
      const call = callOf(event);
      const last = actions.at(-1);
      // The calls of one reply are stored one after another, with the same step and attempt.
      if (key !== null && key === reply && last?.type === 'calls') last.calls.push(call);
      else actions.push({ type: 'calls', calls: [call] });
    }
    reply = key;
  }
  return actions;
}

/** The reply an agent call belongs to (its step, item and attempt), or null for any other event. */
export function replyOf(event: StoredEvent): string | null {
  if (event.source !== 'agent' || (event.type !== 'command' && event.type !== 'tool_call')) return null;
  if (event.data.call_id === undefined) return null;
  return `${event.cause}:${event.data.item_id}:${event.data.attempt}`;
}

function callOf(event: EventOf<'command' | 'tool_call'>): AgentToolCall {
  if (event.type === 'tool_call')
    return { id: event.data.call_id, name: event.data.tool, arguments: event.data.arguments };
  const risk = event.data.security_risk;
  const args = {
    command: event.data.command,
    ...(risk !== undefined && risk !== 'UNKNOWN' && { security_risk: risk }),
  };
  return { id: event.data.call_id ?? '', name: 'run_command', arguments: args };
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
      let reply: string | null = null;
      return {
        observe(event) {
          if (first && event.type === 'conversation_created') recorded = event.data.replay_actions ?? [];
          first = false;
          // A fork goes on live from where it was cut: the recording is the parent's.
          if (event.type === 'conversation_forked') recorded = [];
          // One answer per step: a message, a finish, or a reply's calls (counted at the first).
          const key = replyOf(event);
          const answers =
            event.source === 'agent' &&
            (event.type === 'message' ||
              event.type === 'finish' ||
              ((event.type === 'command' || event.type === 'tool_call') && (key === null || key !== reply)));
          reply = key;
          if (answers) taken += 1;
          // Played out: the recording is not kept.
          if (taken >= recorded.length) recorded = [];
          inner.observe(event);
        },
        step(input) {
          const next = recorded[taken];
          if (next?.type === 'message') {
            const { content, wait_for_response, call_id } = next;
            return Promise.resolve({
              type: 'message',
              content,
              ...(wait_for_response === false && { waitForResponse: false }),
              ...(call_id !== undefined && { callId: call_id }),
            });
          }
          if (next?.type === 'finish') {
            const { content, call_id } = next;
            return Promise.resolve({ type: 'finish', content, ...(call_id !== undefined && { callId: call_id }) });
          }
          if (next?.type === 'run') {
            const { command, security_risk: securityRisk } = next;
            return Promise.resolve({ type: 'run', command, ...(securityRisk && { securityRisk }) });
          }
          if (next) return Promise.resolve(next satisfies AgentMove);
          return inner.step(input);
        },
      };
    },
  };
}
