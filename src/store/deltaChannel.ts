import type { NatsConnection } from '@nats-io/transport-node';
import type { DeltaFrame } from '../../protocol/index.ts';
import { assertConversationId } from './assertConversationId.ts';
import { DEFAULT_SUBJECT_PREFIX } from './natsConnection.ts';

/** One delta as it travels: the frame, and its JSON, written once and sent as is to every client. */
export interface DeltaMessage {
  frame: DeltaFrame;
  json: string;
}

/**
 * Transient `delta` frames of agent replies as they are generated (never
 * stored), published by the node that runs a session and forwarded by every
 * node to its clients of that conversation. At most once, in publish order
 * from one node; a node that misses some asks the owner for the current
 * attempt's deltas (`ClusterRouter.deltas`).
 */
export interface DeltaChannel {
  /** Sends one delta (its JSON is what goes on the wire and to every client). */
  publish(conversationId: string, delta: DeltaMessage): void;
  /** Every conversation's deltas; returns the unsubscribe. */
  subscribe(onDelta: (conversationId: string, delta: DeltaMessage) => void): () => void;
}

/** Deltas on core NATS: `<prefix>.<conversationId>.deltas`, one subscription per node; outside programs may follow them too. */
export function natsDeltaChannel(nc: NatsConnection, subjectPrefix = DEFAULT_SUBJECT_PREFIX): DeltaChannel {
  const idFrom = subjectPrefix.length + 1;
  return {
    publish(conversationId, delta) {
      assertConversationId(conversationId);
      try {
        nc.publish(`${subjectPrefix}.${conversationId}.deltas`, delta.json);
      } catch {
        // A closed or draining connection drops the delta: a node that misses one asks the owner.
      }
    },
    subscribe(onDelta) {
      const sub = nc.subscribe(`${subjectPrefix}.*.deltas`, {
        callback: (err, msg) => {
          if (err) return;
          const json = msg.string();
          const frame = deltaFrom(json);
          if (frame) onDelta(msg.subject.slice(idFrom, msg.subject.length - '.deltas'.length), { frame, json });
        },
      });
      return () => sub.unsubscribe();
    },
  };
}

/** The in-process twin: deltas go straight to the subscribers. */
export function memoryDeltaChannel(): DeltaChannel {
  const subscribers = new Set<(conversationId: string, delta: DeltaMessage) => void>();
  return {
    publish(conversationId, delta) {
      for (const onDelta of subscribers) onDelta(conversationId, delta);
    },
    subscribe(onDelta) {
      subscribers.add(onDelta);
      return () => subscribers.delete(onDelta);
    },
  };
}

/** A delta frame read from text, or null when it is not one (anything on the account may publish there). */
export function deltaFrom(json: string): DeltaFrame | null {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return null;
  }
  const frame = value as Partial<DeltaFrame> | null;
  const count = (n: unknown, min: number) => typeof n === 'number' && Number.isInteger(n) && n >= min;
  return frame?.type === 'delta' &&
    typeof frame.item_id === 'string' &&
    count(frame.attempt, 1) &&
    count(frame.index, 0) &&
    typeof frame.text === 'string'
    ? (frame as DeltaFrame)
    : null;
}
