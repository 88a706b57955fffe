import type { NatsConnection } from '@nats-io/transport-node';
import type { StatusFrame } from '../../protocol/index.ts';
import { assertConversationId } from './assertConversationId.ts';
import { DEFAULT_SUBJECT_PREFIX } from './natsConnection.ts';

/**
 * Transient status frames (never stored), published by whichever node runs a
 * session and forwarded by every node to its clients of that conversation.
 * Delivery is at most once and has no order relative to the events.
 */
export interface StatusChannel {
  publish(conversationId: string, frame: StatusFrame): void;
  /** Every conversation's status frames; returns the unsubscribe. */
  subscribe(onStatus: (conversationId: string, frame: StatusFrame) => void): () => void;
}

/** Status frames on core NATS: `<prefix>.<conversationId>.status`, one subscription per node. */
export function natsStatusChannel(nc: NatsConnection, subjectPrefix = DEFAULT_SUBJECT_PREFIX): StatusChannel {
  const idFrom = subjectPrefix.length + 1;
  return {
    publish(conversationId, frame) {
      assertConversationId(conversationId);
      try {
        nc.publish(`${subjectPrefix}.${conversationId}.status`, JSON.stringify(frame));
      } catch {
        // A closed or draining connection drops the frame: status is best effort.
      }
    },
    subscribe(onStatus) {
      const sub = nc.subscribe(`${subjectPrefix}.*.status`, {
        callback: (err, msg) => {
          if (err) return;
          let frame: StatusFrame;
          try {
            frame = msg.json<StatusFrame>();
          } catch {
            return; // not ours: anything on the account may publish there
          }
          if (frame?.type !== 'status') return;
          onStatus(msg.subject.slice(idFrom, msg.subject.length - '.status'.length), frame);
        },
      });
      return () => sub.unsubscribe();
    },
  };
}

/** The in-process twin: frames go straight to the subscribers. */
export function memoryStatusChannel(): StatusChannel {
  const subscribers = new Set<(conversationId: string, frame: StatusFrame) => void>();
  return {
    publish(conversationId, frame) {
      for (const onStatus of subscribers) onStatus(conversationId, frame);
    },
    subscribe(onStatus) {
      subscribers.add(onStatus);
      return () => subscribers.delete(onStatus);
    },
  };
}
