import type { NatsConnection } from '@nats-io/transport-node';
import type { DeltaFrame } from '../../protocol/index.ts';
import { DEFAULT_SUBJECT_PREFIX } from './natsConnection.ts';
import { memoryTransientChannel, natsTransientChannel, type TransientChannel } from './transientChannel.ts';

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
 * attempt's deltas (`ClusterRouter.deltas`). The JSON is what goes on the
 * wire and to every client.
 */
export type DeltaChannel = TransientChannel<DeltaMessage>;

/** Deltas on core NATS: `<prefix>.<conversationId>.deltas`, one subscription per node; outside programs may follow them too. */
export function natsDeltaChannel(nc: NatsConnection, subjectPrefix = DEFAULT_SUBJECT_PREFIX): DeltaChannel {
  return natsTransientChannel(nc, subjectPrefix, 'deltas', {
    encode: (delta) => delta.json,
    decode: (json) => {
      const frame = deltaFrom(json);
      return frame && { frame, json };
    },
  });
}

/** The in-process twin: deltas go straight to the subscribers. */
export function memoryDeltaChannel(): DeltaChannel {
  return memoryTransientChannel();
}

/** A delta frame read from text, or null when it is not one (anything on the account may publish there). */
export function deltaFrom(json: string): DeltaFrame | null {
  try {
    const value: unknown = JSON.parse(json);
    return isDeltaFrame(value) ? value : null;
  } catch {
    return null;
  }
}

/** Whether a parsed value has the shape of a delta frame. */
export function isDeltaFrame(value: unknown): value is DeltaFrame {
  const frame = value as Partial<DeltaFrame> | null;
  const count = (n: unknown, min: number) => typeof n === 'number' && Number.isInteger(n) && n >= min;
  return (
    frame?.type === 'delta' &&
    typeof frame.item_id === 'string' &&
    count(frame.attempt, 1) &&
    count(frame.index, 0) &&
    typeof frame.text === 'string'
  );
}
