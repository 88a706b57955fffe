import type { AgentState, LoggedEvent } from '../protocol/index.ts';
import type { ConversationEntry, ConversationStore, EventLog, WorkMarker } from '../store/index.ts';
import { wasMidTask } from './loadSession.ts';

/**
 * After a restart, one work marker left by a process that is gone: returns
 * the entry of a conversation to bring back (mid-task), or undefined once the
 * marker is settled. A settled marker (in memory, idle) costs no log read: its
 * entry already holds its state and only leaves memory. An unsettled one
 * (busy, or a state change under way) costs one read of its last event, which
 * says whether it was mid-task and, if not, the state the entry must hold.
 */
export async function recoverMarker(
  marker: WorkMarker,
  conversations: ConversationStore,
  log: EventLog,
): Promise<ConversationEntry | undefined> {
  const id = marker.conversation_id;
  const entry = await conversations.get(marker.user, id);
  if (!entry) {
    // Deleted: the delete removed the entry, not yet the marker.
    await conversations.unmark(id);
    return undefined;
  }
  let state = entry.state;
  if (marker.unsettled) {
    const last = await log.last(id);
    if (wasMidTask(last)) return entry;
    state = stateNamedBy(last) ?? state;
  }
  if (entry.in_memory || entry.state !== state) await conversations.put({ ...entry, state, in_memory: false });
  await conversations.unmark(id);
  return undefined;
}

/** The agent state a log that is not mid-task ends in, when its last event names it. */
function stateNamedBy(last: LoggedEvent | undefined): AgentState | undefined {
  const event = last?.event;
  if (event?.type === 'agent_state_changed' || event?.type === 'session_passivated') return event.data.state;
  return undefined;
}
