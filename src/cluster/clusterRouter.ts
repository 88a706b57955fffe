import type { Logger } from '../logger.ts';
import type { ListPosition, PassivationReason, StatusFrame, UserAction } from '../../protocol/index.ts';
import type { ClusterBus, ConversationEntry, ConversationStore } from '../store/index.ts';
import { errorAnswer, ForwardRequest, isRetryable, NotOwnerError, resultOf } from './forwarding.ts';
import { ClusterOwnership, type Ownership } from './ownership.ts';
import { TOO_MANY_CONVERSATIONS } from '../host/passivationPolicy.ts';
import type { Session, SubmitResult } from '../conversation/session.ts';

/** Pages of a user's index read to find the user's conversations running on other nodes. */
const CAP_SCAN_PAGES = 10;

/** What the router needs of the node's session host. */
export interface RouterHost {
  /** The conversation's session in this process, if it is live here. */
  live(conversationId: string): Session | undefined;
  liveSessions(): Iterable<Session>;
  /** Applies an action to the session here (claimed and brought back when needed); NotOwnerError when another node owns it. */
  actHere(conversationId: string, user: string, action: UserAction, clientId: string): Promise<SubmitResult>;
  /** Deletes the conversation here (claimed when needed); NotOwnerError when another node owns it. */
  deleteHere(conversationId: string, user: string): Promise<void>;
  passivate(conversationId: string, reason: PassivationReason): Promise<void>;
  notify(conversationId: string, frame: StatusFrame): void;
}

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
  readonly #conversations: ConversationStore;
  readonly #maxRunningPerUser: number;
  readonly #logger: Logger;

  constructor(
    host: RouterHost,
    deps: { ownership: Ownership; bus?: ClusterBus; conversations: ConversationStore; logger: Logger },
    maxRunningPerUser: number,
  ) {
    this.#host = host;
    this.#ownership = deps.ownership;
    this.#bus = deps.bus;
    this.#conversations = deps.conversations;
    this.#logger = deps.logger;
    this.#maxRunningPerUser = maxRunningPerUser;
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
    here: (afterForward: boolean) => Promise<SubmitResult>,
  ): Promise<SubmitResult> {
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
          return resultOf(conversationId, await this.#bus.request(err.node, request(), lease));
        }
      } catch (err) {
        if (!isRetryable(err) || performance.now() > until) throw err;
        await new Promise((resolve) => setTimeout(resolve, lease / 8));
      }
    }
  }

  /** A request forwarded by another node: handled here only if this node owns the conversation. */
  async serve(raw: unknown): Promise<unknown> {
    const parsed = ForwardRequest.safeParse(raw);
    if (!parsed.success) return { error: { code: 'BAD_REQUEST', message: 'not a forwarded request' } };
    const request = parsed.data;
    const id = request.conversation_id;
    try {
      // Sent out by another node's per-user cap: only a session here leaves; none here, nothing to do.
      if (request.op === 'passivate') {
        if (this.#isLive(id)) await this.#host.passivate(id, request.reason);
        return { ok: true };
      }
      // Each says NotOwnerError when the conversation moved on from this node: the sender asks again.
      if (request.op === 'act')
        return { ok: true, ...(await this.#host.actHere(id, request.user, request.action, request.client_id)) };
      await this.#host.deleteHere(id, request.user);
      return { ok: true };
    } catch (err) {
      return errorAnswer(err);
    }
  }

  /**
   * The per-user running cap across the cluster, when `session` just started
   * running. The local policy already sent this node's excess out; the
   * user's conversations running on other nodes (their index entries say
   * running) count too, and the oldest of those leave through their owners
   * until the user is within the cap.
   */
  async capAcrossCluster(session: Session): Promise<void> {
    const user = session.owner;
    const bus = this.#bus;
    if (!this.#ownership.clustered || user === undefined || !bus) return;
    const remote = await this.#runningElsewhere(user, session.conversationId);
    let here = 0;
    for (const s of this.#host.liveSessions())
      if (s !== session && !s.closed && s.owner === user && s.state === 'running') here += 1;
    let excess = here + remote.length + 1 - this.#maxRunningPerUser;
    remote.sort((a, b) => (a.running_since ?? 0) - (b.running_since ?? 0));
    for (const victim of remote) {
      if (excess <= 0) return;
      const id = victim.conversation_id;
      const node = await this.#ownership.ownerOf(id);
      if (node === null || node === this.#ownership.nodeId) continue;
      excess -= 1;
      this.#logger.info('per-user cap: a conversation on another node leaves memory', { conversation_id: id, node });
      this.#host.notify(id, TOO_MANY_CONVERSATIONS);
      const request = { op: 'passivate', conversation_id: id, reason: 'too_many_running' };
      resultOf(id, await bus.request(node, request, this.#leaseMs));
    }
  }

  /** The user's conversations whose index entry says running, other than `except` and those live here. */
  async #runningElsewhere(user: string, except: string): Promise<ConversationEntry[]> {
    const found: ConversationEntry[] = [];
    let after: ListPosition | undefined;
    for (let pages = 0; pages < CAP_SCAN_PAGES; pages++) {
      const page = await this.#conversations.list(user, { limit: 100, ...(after && { after }) });
      for (const entry of page.items)
        if (entry.state === 'running' && entry.conversation_id !== except && !this.#isLive(entry.conversation_id))
          found.push(entry);
      const last = page.items.at(-1);
      if (!page.more || !last) break;
      after = { created_at: last.created_at, conversation_id: last.conversation_id };
    }
    return found;
  }

  #isLive(conversationId: string): boolean {
    const live = this.#host.live(conversationId);
    return live !== undefined && !live.closed;
  }
}
