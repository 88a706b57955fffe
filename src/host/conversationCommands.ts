import { randomUUID } from 'node:crypto';
import { trajectoryActions } from '../agent/index.ts';
import { agentStateOf } from '../../machines/index.ts';
import type { CreateConversationBody, UserAction } from '../../protocol/index.ts';
import type { ClusterRouter } from '../cluster/clusterRouter.ts';
import { NotOwnerError, type ForwardRequest } from '../cluster/forwarding.ts';
import { LeaseLapsedError, type Ownership } from '../cluster/ownership.ts';
import { Session } from '../conversation/session.ts';
import { readStoredState } from '../conversation/storedState.ts';
import {
  ConversationNotFoundError,
  IllegalTransitionError,
  NodeDrainingError,
  SessionUnavailableError,
} from '../errors.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { ConnectPoint, ConversationReads } from '../queries/conversationReads.ts';
import type { AppendResult } from '../store/index.ts';
import type { ConversationForks } from './forking.ts';
import type { HostDeps, SessionLimits } from './hostDeps.ts';
import type { LiveSessions } from './liveSessions.ts';
import type { ConversationPurge } from './conversationPurge.ts';
import type { SecretKeeper } from './secretKeeper.ts';
import type { SessionFactory } from './sessionFactory.ts';

/** What the server may ask of a user's conversations that can change them. */
export interface ConversationCommands {
  create(user: string, body: CreateConversationBody): Promise<{ conversation_id: string }>;
  /** Applies a user action (stored once per `clientId`); on another node's conversation, through its owner. */
  act(conversationId: string, user: string, action: UserAction, clientId?: string): Promise<AppendResult>;
  /** A new conversation of the user from the parent's events through `atSeq`; it runs here. */
  fork(parentId: string, user: string, atSeq: number): Promise<{ conversation_id: string }>;
  /** Ends the conversation for good (`session_closed`, which its followers see), then removes all of it (its workspace unless `keepWorkspace`). */
  delete(conversationId: string, user: string, keepWorkspace?: boolean): Promise<void>;
  /**
   * A client (re)connects: where its connection starts. Nothing is stored and
   * a conversation out of memory stays out, with one exception: when the log
   * says the runtime died, a user `reconnect_runtime` is stored (a page
   * refresh is how users fix a dead runtime), decided like any action.
   */
  connect(conversationId: string, user: string): Promise<ConnectPoint>;
}

export interface HostCommandsDeps {
  host: HostDeps;
  limits: SessionLimits;
  live: LiveSessions;
  reads: ConversationReads;
  router: ClusterRouter;
  forks: ConversationForks;
  purge: ConversationPurge;
  factory: SessionFactory;
  ownership: Ownership;
  secrets: SecretKeeper;
  logger: Logger;
  newId: () => string;
}

/** The node's commands: every change to a conversation goes through here, to its owner's session. */
export class HostCommands implements ConversationCommands {
  readonly #deps: HostCommandsDeps;
  /** Conversations being created here: their first events are stored before their record. */
  readonly #creating = new Set<string>();
  /** Set by a drain: no new conversation starts here. */
  draining = false;

  constructor(deps: HostCommandsDeps) {
    this.#deps = deps;
  }

  creating(conversationId: string): boolean {
    return this.#creating.has(conversationId);
  }

  async create(user: string, body: CreateConversationBody): Promise<{ conversation_id: string }> {
    if (this.draining) throw new NodeDrainingError();
    const { ownership, secrets, limits, factory, live } = this.#deps;
    const conversationId = this.#deps.newId();
    secrets.check(body.secrets);
    await ownership.claimNew(conversationId);
    await secrets.keep(conversationId, body.secrets);
    this.#creating.add(conversationId);
    // A creation that fails (its record not written, the log down) was never answered: the next
    // recovery purges what it may have stored (a marker without a record).
    const created = {
      user,
      ...(body.initial_message !== undefined && { initial_message: body.initial_message }),
      confirmation_mode: body.confirmation_mode,
      max_iterations: body.max_iterations,
      ...(body.max_budget !== undefined && { max_budget: body.max_budget }),
      ...(body.instructions !== undefined && { instructions: body.instructions }),
      ...(body.repository !== undefined && { repository: body.repository }),
      secret_names: Object.keys(body.secrets),
      replay: body.replay !== undefined,
      ...(body.replay !== undefined && { replay_actions: trajectoryActions(body.replay.map((item) => item.event)) }),
      // A clone is part of the start: its own bound is added to the start's.
      start_timeout_ms: limits.startTimeoutMs + (body.repository ? limits.cloneTimeoutMs : 0),
      max_rate_limit_retries: limits.rateLimitRetries,
      max_attempts: limits.maxAttempts,
      double_texting: body.double_texting ?? 'enqueue',
    };
    const first = { type: 'create' as const, conversationId, data: created };
    const session = await Session.open(conversationId, factory.depsFor(conversationId), undefined, first).finally(() =>
      this.#creating.delete(conversationId),
    );
    live.adopt(session);
    if (body.initial_message !== undefined) await session.act({ type: 'message', content: body.initial_message });
    return { conversation_id: conversationId };
  }

  act(conversationId: string, user: string, action: UserAction, clientId?: string): Promise<AppendResult> {
    // A forwarded action carries an id, so that sending it again (its owner died or moved) stores it once.
    let forwardId: string | undefined;
    const idOf = () => (forwardId ??= clientId ?? `fwd-${randomUUID()}`);
    return this.#deps.router.routed(
      conversationId,
      () => ({ op: 'act', conversation_id: conversationId, user, action, client_id: idOf() }),
      (afterForward) => this.actHere(conversationId, user, action, afterForward ? idOf() : clientId),
    );
  }

  /** An action on this node's session. One that meets its session leaving memory waits and goes to the one that comes back. */
  async actHere(conversationId: string, user: string, action: UserAction, clientId?: string): Promise<AppendResult> {
    for (let attempt = 0; ; attempt++) {
      const session = await this.session(conversationId, user);
      try {
        // The log scopes msgIds to the conversation, so clients may reuse ids across conversations.
        return await session.act(action, clientId);
      } catch (err) {
        if (!(err instanceof SessionUnavailableError) || attempt >= 2 || !this.#deps.live.leaving(conversationId))
          throw err;
      }
    }
  }

  fork(parentId: string, user: string, atSeq: number): Promise<{ conversation_id: string }> {
    if (this.draining) throw new NodeDrainingError();
    return this.#deps.forks.fork(parentId, user, atSeq);
  }

  async delete(conversationId: string, user: string, keepWorkspace = false): Promise<void> {
    const request = (): ForwardRequest => ({
      op: 'delete',
      conversation_id: conversationId,
      user,
      keep_workspace: keepWorkspace,
    });
    await this.#deps.router.routed(conversationId, request, async () => {
      await this.deleteHere(conversationId, user, keepWorkspace);
      return { seq: 0, duplicate: false };
    });
  }

  /** Deletes a conversation this node owns (or claims, when it is free). */
  async deleteHere(conversationId: string, user: string, keepWorkspace = false): Promise<void> {
    const { live, reads, ownership, logger } = this.#deps;
    await reads.entryOf(conversationId, user);
    if (!live.has(conversationId)) {
      // session_closed is written here: this node must own the conversation (it claims it when free).
      const route = await live.exclusive(conversationId, () => ownership.route(conversationId));
      if (!route.local) throw new NotOwnerError(conversationId, route.node);
    }
    // A rehydration or a passivation under way finishes first: one session writes the end.
    await live.settled(conversationId);
    const record = { conversation_id: conversationId, user, keep_workspace: keepWorkspace };
    await this.#deps.purge.delete(record, async () => {
      const session = live.get(conversationId);
      await this.#end(conversationId, session).catch((err) =>
        logger.warn('session_closed not stored; deleting anyway', {
          conversation_id: conversationId,
          ...errorFields(err),
        }),
      );
      live.remove(conversationId);
      await session?.release('deleted');
    });
  }

  async connect(conversationId: string, user: string): Promise<ConnectPoint> {
    const { live, reads } = this.#deps;
    if (live.get(conversationId)?.user !== user) await reads.entryOf(conversationId, user);
    const { snapshot, throughSeq } = await reads.peek(conversationId);
    if (snapshot.context.runtimeLost !== null && snapshot.status === 'active')
      this.#reconnectRuntime(conversationId, user);
    return { state: agentStateOf(snapshot), throughSeq };
  }

  /** The live session of the user's conversation, rehydrated here when this node owns it (or claims it). */
  async session(conversationId: string, user: string): Promise<Session> {
    const { live, reads, ownership } = this.#deps;
    const running = live.get(conversationId);
    if (running) {
      if (running.user !== user) throw new ConversationNotFoundError(conversationId);
      // A session left from before a lapse is no longer this node's to run (it is being dropped).
      if (!ownership.leaseValid()) throw new LeaseLapsedError(ownership.nodeId);
      return running;
    }
    const entry = await reads.entryOf(conversationId, user);
    // Registered inside the claim step, awaited outside it (it may wait for a passivation, which releases).
    const { rehydrating } = await live.exclusive(conversationId, async () => {
      const route = await ownership.route(conversationId);
      if (!route.local) throw new NotOwnerError(conversationId, route.node);
      return { rehydrating: live.rehydrate(entry) };
    });
    return rehydrating;
  }

  /** Stores `session_closed` through the live session, or through one rebuilt from the log (no effect runs). */
  async #end(conversationId: string, running: Session | undefined): Promise<void> {
    if (running) return running.end('deleted');
    const stored = await readStoredState(this.#deps.host.log, this.#deps.host.snapshots, conversationId);
    // No events, or it ended already (a delete that stopped before its purge).
    if (!stored || stored.state.snapshot.status !== 'active') return;
    await Session.endStored(conversationId, this.#deps.factory.depsFor(conversationId), stored.state, 'deleted');
  }

  #reconnectRuntime(conversationId: string, user: string): void {
    const { logger } = this.#deps;
    logger.info('reconnecting a dead runtime', { conversation_id: conversationId });
    void this.act(conversationId, user, { type: 'reconnect_runtime' }).catch((err: unknown) =>
      // Another connection's reconnect may have come first: this one is then refused, as it should be.
      err instanceof IllegalTransitionError
        ? undefined
        : logger.warn('runtime reconnect failed', { conversation_id: conversationId, ...errorFields(err) }),
    );
  }
}
