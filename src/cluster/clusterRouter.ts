import type { DeltaFrame, PassivationReason, UserAction } from '../../protocol/index.ts';
import { firstAnswer, isDeltaFrame, type AppendResult, type AttemptSchedule, type ClusterBus } from '../store/index.ts';
import { errorAnswer, ForwardRequest, isRetryable, NotOwnerError, resultOf } from './forwarding.ts';
import { ClusterOwnership, type Ownership } from './ownership.ts';

/** What the router needs of the node's session host. */
export interface RouterHost {
  /** Whether the conversation's session runs in this process. */
  isLive(conversationId: string): boolean;
  /** The deltas of the agent step attempt under way in the session here, from index 0, or null. */
  deltasHere(conversationId: string): readonly DeltaFrame[] | null;
  /** Applies an action to the session here (claimed and brought back when needed); NotOwnerError when another node owns it. */
  actHere(conversationId: string, user: string, action: UserAction, clientId: string): Promise<AppendResult>;
  /** Deletes the conversation here (claimed when needed); NotOwnerError when another node owns it. */
  deleteHere(conversationId: string, user: string, keepWorkspace: boolean): Promise<void>;
  passivate(conversationId: string, reason: PassivationReason): Promise<void>;
  /** Its owner stored an action forwarded to it at `seq`: this node's live feed should bring it soon. */
  storedElsewhere?(conversationId: string, seq: number): void;
}

/**
 * A forwarded action with no answer for a second is sent again beside the
 * first, then two seconds later, each waiting up to a lease: one that crossed
 * a nats-server as it stopped is answered by no one (measured in
 * test/e2e/rollingRestart.cluster.test.ts: clients waited out the whole lease).
 * Its id stores it once, whichever the owner gets; the first answer is taken.
 */
const silentAct = (leaseMs: number): AttemptSchedule => ({
  everyMs: [1_000, 2_000],
  timeoutsMs: [leaseMs],
  attempts: 3,
});

/**
 * Sends each request to the node that owns the conversation: runs it here
 * when this node does (claiming it when it is free or its owner's heartbeat
 * lapsed), else forwards it over the cluster bus and asks again when the
 * owner moved or is gone. Answers the requests other nodes forward here.
 */
export class ClusterRouter {
  readonly #host: RouterHost;
  readonly #ownership: Ownership;
  readonly #bus: ClusterBus | undefined;

  constructor(host: RouterHost, deps: { ownership: Ownership; bus?: ClusterBus }) {
    this.#host = host;
    this.#ownership = deps.ownership;
    this.#bus = deps.bus;
  }

  /** Requests sent to the node that owns their conversation, a running total. */
  forwarded = 0;

  get #leaseMs(): number {
    return this.#ownership instanceof ClusterOwnership ? this.#ownership.leaseMs : 5_000;
  }

  /**
   * Runs `here`, which claims the conversation when it is free (or its
   * owner's heartbeat lapsed) and says NotOwnerError when another node owns
   * it: `request()` then goes to that node. An owner that is gone, or moved,
   * is asked again, for up to three leases. `here` is told whether the
   * request was forwarded before (its id must then be used: the first
   * attempt may have been stored).
   */
  async routed(
    conversationId: string,
    request: () => ForwardRequest,
    here: (afterForward: boolean) => Promise<AppendResult>,
  ): Promise<AppendResult> {
    if (!this.#ownership.clustered || !this.#bus) return here(false);
    const lease = this.#leaseMs;
    const until = performance.now() + 3 * lease;
    let forwarded = false;
    for (;;) {
      try {
        try {
          return await here(forwarded);
        } catch (err) {
          if (!(err instanceof NotOwnerError) || err.node === null) throw err;
          if (!forwarded) this.forwarded += 1;
          forwarded = true;
          const body = request();
          const result = resultOf(conversationId, await this.#forward(err.node, body, lease));
          if (body.op === 'act' && result.seq > 0) this.#host.storedElsewhere?.(conversationId, result.seq);
          return result;
        }
      } catch (err) {
        if (!isRetryable(err) || performance.now() > until) throw err;
        await new Promise((resolve) => setTimeout(resolve, lease / 8));
      }
    }
  }

  /** Sends `body` to `node`; an action is sent again beside the first while no answer comes (silentAct). */
  #forward(node: string, body: ForwardRequest, leaseMs: number): Promise<unknown> {
    const bus = this.#bus!;
    if (body.op !== 'act') return bus.request(node, body, leaseMs);
    // Any failure is the answer (the caller asks again when it may): only silence starts another.
    return firstAnswer((timeoutMs) => bus.request(node, body, timeoutMs), silentAct(leaseMs), {
      lost: () => false,
      drop: () => undefined,
    });
  }

  /** A request forwarded by another node: handled here only if this node owns the conversation. */
  async serve(raw: unknown): Promise<unknown> {
    const parsed = ForwardRequest.safeParse(raw);
    if (!parsed.success) return { error: { code: 'BAD_REQUEST', message: 'not a forwarded request' } };
    const request = parsed.data;
    const id = request.conversation_id;
    try {
      // Sent out by another node's per-user cap: only a session here leaves; none here, nothing to do.
      if (request.op === 'deltas') return { ok: true, deltas: this.#host.deltasHere(id) ?? [] };
      if (request.op === 'passivate') {
        if (this.#isLive(id)) await this.#host.passivate(id, request.reason);
        return { ok: true };
      }
      // Each says NotOwnerError when the conversation moved on from this node: the sender asks again.
      if (request.op === 'act')
        return { ok: true, ...(await this.#host.actHere(id, request.user, request.action, request.client_id)) };
      await this.#host.deleteHere(id, request.user, request.keep_workspace);
      return { ok: true };
    } catch (err) {
      return errorAnswer(err);
    }
  }

  /**
   * The deltas of the agent step attempt under way, from whichever node runs
   * the conversation (this one, or its owner over the cluster bus); null when
   * none is known or the owner did not answer within a lease (a client then
   * gets the stored message, and the next attempt's deltas).
   */
  async deltas(conversationId: string): Promise<readonly DeltaFrame[] | null> {
    if (this.#isLive(conversationId)) return this.#host.deltasHere(conversationId);
    try {
      const node = await this.ownerElsewhere(conversationId);
      if (node === null || !this.#bus) return null;
      const request: ForwardRequest = { op: 'deltas', conversation_id: conversationId };
      const answer = (await this.#bus.request(node, request, this.#leaseMs)) as { deltas?: unknown };
      if (!Array.isArray(answer?.deltas)) return null;
      return answer.deltas.filter(isDeltaFrame);
    } catch {
      return null;
    }
  }

  /** The node other than this one that owns the conversation, or null (no cluster, no owner, or this node). */
  async ownerElsewhere(conversationId: string): Promise<string | null> {
    if (!this.#bus) return null;
    const node = await this.#ownership.ownerOf(conversationId);
    return node === this.#ownership.nodeId ? null : node;
  }

  /** Asks `node` to send the conversation out of memory (the per-user running cap across the cluster). */
  async passivateOn(node: string, conversationId: string, reason: PassivationReason): Promise<void> {
    if (!this.#bus) return;
    const request: ForwardRequest = { op: 'passivate', conversation_id: conversationId, reason };
    resultOf(conversationId, await this.#bus.request(node, request, this.#leaseMs));
  }

  #isLive(conversationId: string): boolean {
    return this.#host.isLive(conversationId);
  }
}
