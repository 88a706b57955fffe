import { foldEvents, sessionMachine, SESSION_MACHINE_VERSION, type SessionSnapshot } from '../../machines/index.ts';
import type { AgentState, LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import type { EventLog, SnapshotRecord, SnapshotStore } from '../store/index.ts';

/** A conversation's state as its log (and snapshot) give it: what a session is rehydrated from. `history` is null when it came from a snapshot (the agent's context is then built from the log on demand). */
export interface StoredState {
  snapshot: SessionSnapshot;
  lastSeq: number;
  nextEventId: number;
  history: StoredEvent[] | null;
  /** The last `agent_state_changed` among the events read, if any. */
  recordedState: AgentState | undefined;
}

export interface StoredRead {
  state: StoredState;
  from: 'snapshot' | 'log';
  /** Events folded on top of the snapshot (or the whole log). */
  folded: number;
  /** The events read (after the snapshot, or all), with their seq. */
  read: LoggedEvent[];
}

/**
 * Rebuilds a conversation's session state: the latest snapshot of this
 * machine version plus a fold of the events after it, or a fold of the whole
 * log when there is no usable snapshot. Pure folding: no effect runs.
 * Returns undefined for a conversation with no events.
 */
export async function readStoredState(
  log: EventLog,
  snapshots: SnapshotStore,
  conversationId: string,
): Promise<StoredRead | undefined> {
  const record = await snapshots.get(conversationId);
  const base = record && record.machine_version === SESSION_MACHINE_VERSION ? snapshotFrom(record) : undefined;
  if (record && base) {
    const { items } = await log.read(conversationId, { afterSeq: record.seq });
    const { snapshot } = foldEvents(items, { from: base });
    return {
      state: {
        snapshot,
        lastSeq: items.at(-1)?.seq ?? record.seq,
        nextEventId: record.next_event_id + items.length,
        history: null,
        recordedState: lastRecordedState(items),
      },
      from: 'snapshot',
      folded: items.length,
      read: items,
    };
  }
  const { items } = await log.read(conversationId);
  if (items.length === 0) return undefined;
  const { snapshot } = foldEvents(items);
  const last = items[items.length - 1]!;
  return {
    state: {
      snapshot,
      lastSeq: last.seq,
      nextEventId: last.event.id + 1,
      history: items.map((i) => i.event),
      recordedState: lastRecordedState(items),
    },
    from: 'log',
    folded: items.length,
    read: items,
  };
}

/** A persisted snapshot (or checkpoint) back as a machine snapshot; undefined when it does not fit the machine. */
export function snapshotFrom(record: SnapshotRecord): SessionSnapshot | undefined {
  const persisted = record.snapshot as { value?: unknown; context?: unknown } | null;
  if (!persisted || typeof persisted !== 'object' || !persisted.context) return undefined;
  try {
    return sessionMachine.resolveState({
      value: persisted.value as SessionSnapshot['value'],
      context: persisted.context as SessionSnapshot['context'],
    });
  } catch {
    return undefined;
  }
}

/** The agent state of the last `agent_state_changed` among the events (stored events, or logged ones), if any. */
export function lastRecordedState(items: readonly (LoggedEvent | StoredEvent)[]): AgentState | undefined {
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i]!;
    const event = 'event' in item ? item.event : item;
    if (event.type === 'agent_state_changed') return event.data.state;
  }
  return undefined;
}
