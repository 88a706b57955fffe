import type { NatsConnection } from '@nats-io/transport-node';
import type { StatusFrame } from '../../protocol/index.ts';
import { DEFAULT_SUBJECT_PREFIX } from './natsConnection.ts';
import { memoryTransientChannel, natsTransientChannel, type TransientChannel } from './transientChannel.ts';

/**
 * Transient status frames (never stored), published by whichever node runs a
 * session and forwarded by every node to its clients of that conversation.
 * Delivery is at most once and has no order relative to the events.
 */
export type StatusChannel = TransientChannel<StatusFrame>;

/** Status frames on core NATS: `<prefix>.<conversationId>.status`, one subscription per node. */
export function natsStatusChannel(nc: NatsConnection, subjectPrefix = DEFAULT_SUBJECT_PREFIX): StatusChannel {
  return natsTransientChannel(nc, subjectPrefix, 'status', {
    encode: (frame) => JSON.stringify(frame),
    decode: (text) => {
      try {
        const frame = JSON.parse(text) as StatusFrame | null;
        return frame?.type === 'status' ? frame : null;
      } catch {
        return null;
      }
    },
  });
}

/** The in-process twin: frames go straight to the subscribers. */
export function memoryStatusChannel(): StatusChannel {
  return memoryTransientChannel();
}
