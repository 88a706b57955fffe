import type { NatsConnection } from '@nats-io/transport-node';
import { assertConversationId } from './assertConversationId.ts';

/**
 * Transient messages about conversations (never stored): published by the
 * node that runs a session, received by every node. At most once, in publish
 * order from one node, and in no order relative to the stored events.
 */
export interface TransientChannel<T> {
  publish(conversationId: string, message: T): void;
  /** Every conversation's messages; returns the unsubscribe. */
  subscribe(onMessage: (conversationId: string, message: T) => void): () => void;
}

/** How one kind of message goes on the wire: its text, and back (null for text that is not one). */
export interface WireFormat<T> {
  encode(message: T): string;
  decode(text: string): T | null;
}

/** On core NATS: `<prefix>.<conversationId>.<kind>`, one subscription per node; outside programs may follow it too. */
export function natsTransientChannel<T>(
  nc: NatsConnection,
  subjectPrefix: string,
  kind: string,
  format: WireFormat<T>,
): TransientChannel<T> {
  const idFrom = subjectPrefix.length + 1;
  const suffix = `.${kind}`.length;
  return {
    publish(conversationId, message) {
      assertConversationId(conversationId);
      try {
        nc.publish(`${subjectPrefix}.${conversationId}.${kind}`, format.encode(message));
      } catch {
        // A closed or draining connection drops the message: it is transient.
      }
    },
    subscribe(onMessage) {
      const sub = nc.subscribe(`${subjectPrefix}.*.${kind}`, {
        callback: (err, msg) => {
          if (err) return;
          // Not ours when it does not decode: anything on the account may publish there.
          const message = format.decode(msg.string());
          if (message !== null) onMessage(msg.subject.slice(idFrom, msg.subject.length - suffix), message);
        },
      });
      return () => sub.unsubscribe();
    },
  };
}

/** The in-process twin: messages go straight to the subscribers. */
export function memoryTransientChannel<T>(): TransientChannel<T> {
  const subscribers = new Set<(conversationId: string, message: T) => void>();
  return {
    publish(conversationId, message) {
      for (const onMessage of subscribers) onMessage(conversationId, message);
    },
    subscribe(onMessage) {
      subscribers.add(onMessage);
      return () => subscribers.delete(onMessage);
    },
  };
}
