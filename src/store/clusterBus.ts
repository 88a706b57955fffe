import { errors, headers, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { TetherError } from '../errors.ts';

export const DEFAULT_NODE_SUBJECT_PREFIX = 'tether.node';

/** The header that names the node a request comes from. */
export const FROM_NODE_HEADER = 'Tether-From-Node';

/** The answer to a request that names no node: only Tether nodes forward actions and reads. */
export const NOT_A_NODE = {
  error: {
    code: 'NOT_A_NODE',
    message: 'requests on tether.node.* come from Tether nodes only (no node named itself)',
  },
};

/** Nobody answered a node's requests in time: it is gone, frozen or unreachable. */
export class NodeUnreachableError extends TetherError {
  constructor(nodeId: string, why: string, options?: { cause?: unknown }) {
    super('NODE_UNREACHABLE', `node ${nodeId} did not answer: ${why}`, options);
  }
}

/** Requests from node to node (an action forwarded to a conversation's owner), JSON in and out. */
export interface ClusterBus {
  /** Answers requests sent to `nodeId` with `handler` until the returned stop is called. */
  serve(nodeId: string, handler: (request: unknown) => Promise<unknown>): () => Promise<void>;
  /** The node's answer; NodeUnreachableError when no node serves it or it did not answer within `timeoutMs`. */
  request(nodeId: string, body: unknown, timeoutMs: number): Promise<unknown>;
}

/**
 * Core NATS request/reply on `<prefix>.<nodeId as base64url>`. Each request
 * names the node it comes from (`Tether-From-Node`: `self`); one that names
 * none is answered NOT_A_NODE without reaching the handler. Who may publish
 * there at all is NATS's to say: with deploy/nats/tether.conf, the `tether`
 * user only (docs/security.md, "NATS users").
 */
export function natsClusterBus(nc: NatsConnection, self: string, prefix = DEFAULT_NODE_SUBJECT_PREFIX): ClusterBus {
  const subject = (nodeId: string) => `${prefix}.${Buffer.from(nodeId).toString('base64url')}`;
  return {
    serve(nodeId, handler) {
      const sub: Subscription = nc.subscribe(subject(nodeId), {
        callback: (err, msg) => {
          if (err) return;
          if (!msg.headers?.get(FROM_NODE_HEADER)) {
            msg.respond(JSON.stringify(NOT_A_NODE));
            return;
          }
          void (async () => {
            let answer: unknown;
            try {
              answer = await handler(msg.json());
            } catch {
              // The handler answers every error it knows; anything else is internal.
              answer = { error: { code: 'INTERNAL', message: 'internal error' } };
            }
            msg.respond(JSON.stringify(answer));
          })().catch(() => undefined);
        },
      });
      return async () => {
        await sub.drain().catch(() => undefined);
      };
    },
    async request(nodeId, body, timeoutMs) {
      try {
        const from = headers();
        from.set(FROM_NODE_HEADER, self);
        const msg = await nc.request(subject(nodeId), JSON.stringify(body), { timeout: timeoutMs, headers: from });
        return msg.json();
      } catch (err) {
        if (err instanceof errors.NoRespondersError)
          throw new NodeUnreachableError(nodeId, 'no responders', { cause: err });
        if (err instanceof errors.TimeoutError)
          throw new NodeUnreachableError(nodeId, `no answer within ${timeoutMs} ms`, { cause: err });
        // Also when the connection dropped with the request out (natsConnection.ts): asked again.
        if (err instanceof errors.RequestError) throw new NodeUnreachableError(nodeId, err.message, { cause: err });
        throw err;
      }
    },
  };
}

/** The in-process twin: nodes are handlers in one Map. */
export function memoryClusterBus(): ClusterBus {
  const handlers = new Map<string, (request: unknown) => Promise<unknown>>();
  return {
    serve(nodeId, handler) {
      handlers.set(nodeId, handler);
      return async () => {
        if (handlers.get(nodeId) === handler) handlers.delete(nodeId);
      };
    },
    async request(nodeId, body) {
      const handler = handlers.get(nodeId);
      if (!handler) throw new NodeUnreachableError(nodeId, 'no responders');
      return JSON.parse(JSON.stringify(await handler(JSON.parse(JSON.stringify(body))))) as unknown;
    },
  };
}
