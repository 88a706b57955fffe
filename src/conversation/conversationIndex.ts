import { agentStateOf, BUSY_AGENT_STATES, type SessionSnapshot } from '../../machines/index.ts';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import type { ConversationEntry } from '../store/index.ts';

/**
 * The conversation index as one pure projection of the log, and the rules of
 * its work marker. The write path (SessionIndex), recovery after a crash and
 * forks all use these; only SessionIndex and recovery write the results.
 */

/**
 * The index entry after one stored event: `(entry, event) → entry`. Pure.
 * Undefined before the conversation's first event and after it ended for good.
 */
export function projectEntry(entry: ConversationEntry | undefined, event: StoredEvent): ConversationEntry | undefined {
  switch (event.type) {
    case 'conversation_created':
      return {
        conversation_id: event.conversation_id,
        user: event.data.user,
        created_at: event.ts,
        state: 'loading',
        in_memory: true,
      };
    // A fork is created when it is forked: its copied events came before, with its parent's times.
    case 'conversation_forked':
      return entry && { ...entry, created_at: event.ts, in_memory: true };
    case 'agent_state_changed':
      return entry && withState(entry, event.data.state, event.ts);
    // Out of memory: the state it comes back in, and since when it runs (its spell outlives the passivation).
    case 'session_passivated':
      return entry && { ...withState(entry, event.data.state, event.ts), in_memory: false };
    case 'session_rehydrated':
      return entry && { ...entry, in_memory: true };
    case 'session_closed':
      return undefined;
    default:
      return entry;
  }
}

/** The entry after several events, in order. */
export function projectEntries(
  entry: ConversationEntry | undefined,
  events: readonly StoredEvent[],
): ConversationEntry | undefined {
  return events.reduce<ConversationEntry | undefined>(projectEntry, entry);
}

function withState(entry: ConversationEntry, state: ConversationEntry['state'], ts: string): ConversationEntry {
  const { running_since: since, ...rest } = entry;
  if (state !== 'running') return { ...rest, state };
  // Still running (a passivation, a repeated fact): the spell started earlier.
  const runningSince = entry.state === 'running' && since !== undefined ? since : Date.parse(ts);
  return { ...rest, state, running_since: runningSince };
}

/**
 * The entry a rehydrated session starts its projection from: the stored one
 * (which may lag its log: a process that died between an append and its
 * index write) set right by the state its log folds to.
 */
export function entryOfFold(known: ConversationEntry, snapshot: SessionSnapshot): ConversationEntry {
  const { running_since: _, ...rest } = known;
  const state = agentStateOf(snapshot);
  const since = snapshot.context.runningSince;
  return { ...rest, state, ...(state === 'running' && since !== null && { running_since: since }) };
}

/** Whether the conversation works by itself now: in memory, in a state the machine tags `busy`. */
export function isBusyEntry(entry: ConversationEntry | undefined): boolean {
  return entry !== undefined && entry.in_memory && BUSY_AGENT_STATES.has(entry.state);
}

/**
 * A conversation's work marker: absent, settled (in memory, idle: recovery
 * reads no log) or unsettled (busy, or a state change under way: recovery
 * reads its last event). It over-approximates: raised before an append, lowered after.
 */
export type Marker = 'absent' | 'settled' | 'unsettled';
const RANK: Record<Marker, number> = { absent: 0, settled: 1, unsettled: 2 };

/**
 * The marker a decision needs before its events are appended, when it must
 * be raised above `held`; null when `held` says enough already. A process
 * that dies after the append leaves a marker that says too much, never too little.
 */
export function markerBeforeAppend(
  held: Marker,
  before: ConversationEntry | undefined,
  after: ConversationEntry | undefined,
  events: readonly StoredEvent[],
): Marker | null {
  if (after === undefined) return null;
  const changes = before === undefined || before.state !== after.state;
  const needed: Marker = isBusyEntry(after) || changes ? 'unsettled' : comesBack(events) ? 'settled' : 'absent';
  return RANK[needed] > RANK[held] ? needed : null;
}

/**
 * What to do with the marker once the entry holds the decision's state:
 * removed when the session left memory (but for a shutdown mid-task, which
 * recovery must find), settled when it was unsettled and is idle now, else kept.
 */
export function markerAfterApply(
  held: Marker,
  after: ConversationEntry,
  events: readonly StoredEvent[],
): 'unmark' | 'settle' | null {
  const passivated = events.find((e) => e.type === 'session_passivated');
  if (passivated) {
    return passivated.data.reason === 'shutdown' && BUSY_AGENT_STATES.has(passivated.data.state) ? null : 'unmark';
  }
  return held === 'unsettled' && !isBusyEntry(after) ? 'settle' : null;
}

/** Whether the decision brings the conversation into memory (created or rehydrated): its entry is written whole. */
export function comesBack(events: readonly StoredEvent[]): boolean {
  return events.some((e) => e.type === 'conversation_created' || e.type === 'session_rehydrated');
}

/**
 * Whether a conversation whose log ends with this event was in the middle of
 * something when its process died (or shut down), and must be brought back to
 * finish it by itself: its last agent state is one the machine tags `busy`.
 */
export function wasMidTask(last: LoggedEvent | undefined): boolean {
  if (!last) return false;
  const event = last.event;
  if (event.type === 'agent_state_changed') return BUSY_AGENT_STATES.has(event.data.state);
  if (event.type === 'session_passivated')
    return event.data.reason === 'shutdown' && BUSY_AGENT_STATES.has(event.data.state);
  return event.type !== 'session_closed';
}

/** The entry of a conversation that is not mid-task after its process died: its last event projected, out of memory. */
export function settledAfterCrash(entry: ConversationEntry, last: LoggedEvent | undefined): ConversationEntry {
  const projected = last ? (projectEntry(entry, last.event) ?? entry) : entry;
  return { ...projected, in_memory: false };
}
