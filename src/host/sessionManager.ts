import { randomUUID } from 'node:crypto';
import pLimit, { type LimitFunction } from 'p-limit';
import { replayable, trajectoryActions } from '../agent/index.ts';
import { errorFields, silentLogger, type Logger } from '../logger.ts';
import type {
  ConversationInfo,
  ClusterView,
  ConversationOwner,
  ConversationState,
  CreateConversationBody,
  ListPosition,
  PassivationReason,
  UserAction,
} from '../../protocol/index.ts';
import { agentStateOf } from '../../machines/index.ts';
import {
  memoryCheckpointStore,
  memoryStatusChannel,
  type CheckpointStore,
  type ConversationEntry,
  type ReadPage,
  type StatusChannel,
} from '../store/index.ts';
import { ConversationFeed } from '../queries/conversationFeed.ts';
import { ConversationReads, type ConnectPoint, type ConversationPage } from '../queries/conversationReads.ts';
import { ConversationForks } from './forking.ts';
import { ConversationNotFoundError, IllegalTransitionError, NodeDrainingError, SessionClosedError } from '../errors.ts';
import { ClusterRouter } from '../cluster/clusterRouter.ts';
import { NotOwnerError, type ForwardRequest } from '../cluster/forwarding.ts';
import { ClusterOwnership, LeaseLapsedError, soloOwnership, type Ownership } from '../cluster/ownership.ts';
import { loadSessionState } from '../conversation/loadSession.ts';
import { PassivationPolicy } from './passivationPolicy.ts';
import { maskingLogger } from '../conversation/secretMasker.ts';
import { SecretKeeper } from './secretKeeper.ts';
import { Session, type SessionDeps, type SubmitResult } from '../conversation/session.ts';
import { SessionIndex } from '../conversation/sessionIndex.ts';
import { DEFAULT_LIMITS, type SessionLimits, type SessionManagerDeps } from './sessionManagerDeps.ts';
import { WorkRecovery } from './workRecovery.ts';

/**
 * The actor host: creates sessions, brings them back from snapshot and log on
 * demand (a bounded number at a time, one load per conversation), sends idle
 * ones out of memory, routes actions and checks ownership.
 */
export class SessionManager {
  readonly feed: ConversationFeed;
  readonly limits: SessionLimits;
  readonly #deps: SessionManagerDeps;
  readonly #clock: () => Date;
  readonly #startedAt: string;
  readonly #logger: Logger;
  readonly #status: StatusChannel;
  readonly #live = new Map<string, Session>();
  readonly #loading = new Map<string, Promise<Session>>();
  readonly #leaving = new Map<string, Promise<void>>();
  readonly #rehydrations: LimitFunction;
  readonly #policy: PassivationPolicy;
  readonly #reads: ConversationReads;
  readonly #checkpoints: CheckpointStore;
  readonly #forks: ConversationForks;
  /** Conversations being created here: their first events are stored before their record. */
  readonly #creating = new Set<string>();
  readonly #secrets: SecretKeeper;
  readonly #ownership: Ownership;
  readonly #router: ClusterRouter;
  #stopServing: (() => Promise<void>) | null = null;
  /** Set by a drain: no new conversation starts here. */
  #draining = false;
  readonly #recovery: WorkRecovery;
  /**
   * Per conversation, the tail of its claim-and-load and check-and-release
   * steps, which run one at a time: a release never deletes the owner record
   * a load on this node has just read as its own.
   */
  readonly #claims = new Map<string, Promise<unknown>>();

  constructor(deps: SessionManagerDeps) {
    this.#deps = deps;
    this.#ownership = deps.ownership ?? soloOwnership;
    this.limits = { ...DEFAULT_LIMITS, ...deps.limits };
    this.#clock = deps.clock ?? (() => new Date());
    this.#startedAt = this.#clock().toISOString();
    this.#secrets = new SecretKeeper(deps.secrets);
    this.#logger = maskingLogger(deps.logger ?? silentLogger, () => this.#secrets.values());
    this.#status = deps.status ?? memoryStatusChannel();
    this.feed = new ConversationFeed(deps.log, this.#status);
    this.#checkpoints = deps.checkpoints ?? memoryCheckpointStore();
    this.#reads = new ConversationReads({ ...deps, checkpoints: this.#checkpoints }, (id) => this.#live.get(id));
    this.#forks = new ConversationForks({
      ...deps,
      checkpoints: this.#checkpoints,
      reads: this.#reads,
      ownership: this.#ownership,
      secrets: this.#secrets,
      logger: this.#logger,
      clock: this.#clock,
      newId: () => this.#newId(),
      checkpointEvery: this.limits.checkpointEvery,
      sessionDeps: (id, known) => this.#sessionDeps(id, known),
      adopt: (session) => {
        this.#live.set(session.conversationId, session);
        // Copied while the node began to drain: it leaves with the others.
        if (this.#draining) void this.passivate(session.conversationId, 'shutdown');
      },
      purge: (id, user) => this.#purge(id, user, true),
    });
    this.#rehydrations = pLimit(this.limits.rehydrateConcurrency);
    this.#policy = new PassivationPolicy(
      {
        live: () => this.#live.values(),
        connections: (id) => this.feed.count(id),
        passivate: (session, reason) => this.passivate(session.conversationId, reason),
        notify: (id, frame) => this.feed.publishStatus(id, frame),
      },
      this.limits,
      () => this.#clock().getTime(),
    );
    this.#policy.start();
    this.#recovery = new WorkRecovery(
      {
        here: (id) => this.#live.has(id) || this.#loading.has(id) || this.#creating.has(id) || this.#forks.copying(id),
        load: (entry) => this.#load(entry),
        exclusive: (id, work) => this.#claimStep(id, work),
      },
      {
        ...deps,
        ownership: this.#ownership,
        logger: this.#logger,
        concurrency: this.limits.rehydrateConcurrency,
        purge: (id, user, unanswered) => this.#purge(id, user, unanswered),
      },
    );
    this.#router = new ClusterRouter(
      {
        live: (id) => this.#live.get(id),
        liveSessions: () => this.#live.values(),
        actHere: (id, user, action, clientId) => this.#actHere(id, user, action, clientId),
        deleteHere: (id, user) => this.#deleteHere(id, user),
        passivate: (id, reason) => this.passivate(id, reason),
        notify: (id, frame) => this.feed.publishStatus(id, frame),
      },
      { ownership: this.#ownership, bus: deps.bus, conversations: deps.conversations, logger: this.#logger },
      this.limits.maxRunningPerUser,
    );
  }

  /** This node's id in the cluster ('solo' without one). */
  get nodeId(): string {
    return this.#ownership.nodeId;
  }

  /**
   * Joins the cluster, when there is one: renews this node's heartbeat, then
   * answers the actions other nodes forward to it. Without one, nothing to do.
   */
  async start(): Promise<void> {
    const ownership = this.#ownership;
    if (!(ownership instanceof ClusterOwnership)) return;
    await ownership.start({
      lapsed: () => this.#dropAll('the lease lapsed'),
      recover: (reason) => {
        this.#logger.info('looking for unfinished conversations', { reason });
        void this.recover().catch((err: unknown) => this.#logger.error('recovery failed', errorFields(err)));
      },
      liveSessions: () => this.liveCount,
    });
    this.#stopServing = this.#deps.bus?.serve(ownership.nodeId, (request) => this.#router.serve(request)) ?? null;
  }

  async create(user: string, body: CreateConversationBody): Promise<{ conversation_id: string }> {
    if (this.#draining) throw new NodeDrainingError();
    const conversationId = this.#newId();
    this.#secrets.check(body.secrets);
    await this.#ownership.claimNew(conversationId);
    await this.#secrets.keep(conversationId, body.secrets);
    this.#creating.add(conversationId);
    // A creation that fails (its record not written, the log down) was never answered: the next
    // recovery purges what it may have stored (a marker without a record).
    const session = await Session.create(conversationId, this.#sessionDeps(conversationId), {
      user,
      ...(body.initial_message !== undefined && { initial_message: body.initial_message }),
      confirmation_mode: body.confirmation_mode,
      max_iterations: body.max_iterations,
      ...(body.max_budget !== undefined && { max_budget: body.max_budget }),
      ...(body.instructions !== undefined && { instructions: body.instructions }),
      secret_names: Object.keys(body.secrets),
      replay: body.replay !== undefined,
      ...(body.replay !== undefined && { replay_actions: trajectoryActions(body.replay.map((item) => item.event)) }),
      start_timeout_ms: this.limits.startTimeoutMs,
    }).finally(() => this.#creating.delete(conversationId));
    this.#live.set(conversationId, session);
    if (body.initial_message !== undefined) {
      await session.act({ type: 'message', content: body.initial_message });
    }
    return { conversation_id: conversationId };
  }

  /** One page of the user's conversations, newest first (see ConversationReads.list). */
  list(user: string, page: { limit: number; after?: ListPosition }): Promise<ConversationPage> {
    return this.#reads.list(user, page);
  }

  /** A conversation as it stands, and the node that runs it (the user's own only). */
  async info(conversationId: string, user: string): Promise<ConversationInfo> {
    const info = await this.#reads.info(conversationId, user);
    return { ...info, owner: await this.#ownership.ownerOf(conversationId) };
  }

  /** The nodes of the cluster (this process alone without one), and which one answers. */
  async cluster(): Promise<ClusterView> {
    const ownership = this.#ownership;
    const nodes = ownership.clustered
      ? await ownership.describeNodes()
      : [
          {
            node_id: ownership.nodeId,
            url: null,
            live_sessions: this.liveCount,
            started_at: this.#startedAt,
            last_heartbeat: this.#clock().toISOString(),
          },
        ];
    return { node_id: ownership.nodeId, nodes };
  }

  /** The node that runs one of the user's conversations, or null when none does. */
  async ownerNode(conversationId: string, user: string): Promise<ConversationOwner> {
    await this.#reads.owned(conversationId, user);
    const owner = await this.#ownership.ownerOf(conversationId);
    const node = owner === null ? null : (await this.cluster()).nodes.find((n) => n.node_id === owner);
    // An owner whose heartbeat aged out between the two reads runs nothing any more.
    return { conversation_id: conversationId, owner: node ?? null };
  }

  events(conversationId: string, user: string, page: { afterSeq: number; limit: number }): Promise<ReadPage> {
    return this.#reads.events(conversationId, user, page);
  }

  /** The conversation right after its event at `atSeq` (default: its last): a pure fold, nothing wakes. */
  stateAt(conversationId: string, user: string, atSeq?: number): Promise<ConversationState> {
    return this.#reads.stateAt(conversationId, user, atSeq);
  }

  /** A new conversation of the user from the parent's events through `atSeq`; it runs here. */
  fork(parentId: string, user: string, atSeq: number): Promise<{ conversation_id: string }> {
    if (this.#draining) throw new NodeDrainingError();
    return this.#forks.fork(parentId, user, atSeq);
  }

  /** The live session of an owned conversation, brought back from its log when needed. */
  async session(conversationId: string, user: string): Promise<Session> {
    const live = this.#live.get(conversationId);
    if (live && !live.closed) {
      if (live.owner !== user) throw new ConversationNotFoundError(conversationId);
      // A session left from before a lapse is no longer this node's to run (it is being dropped).
      if (!this.#ownership.leaseValid()) throw new LeaseLapsedError(this.#ownership.nodeId);
      return live;
    }
    const entry = await this.#reads.owned(conversationId, user);
    // The load is registered inside the claim step, and awaited outside it (it may wait for a passivation, which releases).
    const { loading } = await this.#claimStep(conversationId, async () => {
      const route = await this.#ownership.route(conversationId);
      if (!route.local) throw new NotOwnerError(conversationId, route.node);
      return { loading: this.#load(entry) };
    });
    return loading;
  }

  /**
   * A client (re)connects to listen: where its connection starts. Nothing is
   * stored and a conversation out of memory stays out, with one exception:
   * when the log says the runtime died, a user `reconnect_runtime` is stored
   * (a page refresh is how users fix a dead runtime), decided like any action.
   */
  async connect(conversationId: string, user: string): Promise<ConnectPoint> {
    const live = this.#live.get(conversationId);
    if (!(live && !live.closed && live.owner === user)) await this.#reads.owned(conversationId, user);
    const { snapshot, throughSeq, lastEventId } = await this.#reads.peek(conversationId);
    if (snapshot.context.runtimeLost !== null && snapshot.status === 'active')
      this.#reconnectRuntime(conversationId, user);
    return { state: agentStateOf(snapshot), throughSeq, lastEventId };
  }

  /** Applies a user action. An action that meets its session leaving memory waits and goes to the one that comes back. */
  async act(conversationId: string, user: string, action: UserAction, clientId?: string): Promise<SubmitResult> {
    // A forwarded action carries an id, so that sending it again (its owner died or moved) stores it once.
    let forwardId: string | undefined;
    const idOf = () => (forwardId ??= clientId ?? `fwd-${randomUUID()}`);
    return this.#router.routed(
      conversationId,
      () => ({ op: 'act', conversation_id: conversationId, user, action, client_id: idOf() }),
      (afterForward) => this.#actHere(conversationId, user, action, afterForward ? idOf() : clientId),
    );
  }

  async #actHere(conversationId: string, user: string, action: UserAction, clientId?: string): Promise<SubmitResult> {
    for (let attempt = 0; ; attempt++) {
      const session = await this.session(conversationId, user);
      try {
        // The log scopes msgIds to the conversation, so clients may reuse ids across conversations.
        return await session.act(action, clientId);
      } catch (err) {
        if (!(err instanceof SessionClosedError) || attempt >= 2 || !this.#leaving.has(conversationId)) throw err;
      }
    }
  }

  /** Sends a session out of memory (snapshot, actor and runtime stopped, workspace kept). */
  passivate(conversationId: string, reason: PassivationReason): Promise<void> {
    const session = this.#live.get(conversationId);
    if (!session || session.closed) return this.#leaving.get(conversationId) ?? Promise.resolve();
    let leaving = this.#leaving.get(conversationId);
    if (!leaving) {
      leaving = session
        .passivate(reason)
        .catch((err) =>
          this.#logger.warn('passivation failed', { conversation_id: conversationId, ...errorFields(err) }),
        )
        .finally(async () => {
          this.#leaving.delete(conversationId);
          if (this.#live.get(conversationId) === session) this.#live.delete(conversationId);
          // Out of memory: the node that needs it next claims it.
          await this.#claimStep(conversationId, async () => {
            if (!this.#live.has(conversationId) && !this.#loading.has(conversationId))
              await this.#ownership.release(conversationId);
          });
        });
      this.#leaving.set(conversationId, leaving);
      this.#logger.info('session passivated', { conversation_id: conversationId, reason });
    }
    return leaving;
  }

  /**
   * Deletes a conversation: stores `session_closed` (so the clients and NATS
   * subscribers following it see it end), then purges its events, snapshot
   * and record. The workspace stays.
   */
  async delete(conversationId: string, user: string): Promise<void> {
    const request = (): ForwardRequest => ({ op: 'delete', conversation_id: conversationId, user });
    await this.#router.routed(conversationId, request, async () => {
      await this.#deleteHere(conversationId, user);
      return { seq: 0, duplicate: false };
    });
  }

  async #deleteHere(conversationId: string, user: string): Promise<void> {
    await this.#reads.owned(conversationId, user);
    if (!this.isLive(conversationId)) {
      // session_closed is written here: this node must own the conversation (it claims it when free).
      const route = await this.#claimStep(conversationId, () => this.#ownership.route(conversationId));
      if (!route.local) throw new NotOwnerError(conversationId, route.node);
    }
    // A load or a passivation under way finishes first: one session writes the end.
    await this.#loading.get(conversationId)?.catch(() => undefined);
    await this.#leaving.get(conversationId);
    const session = this.#live.get(conversationId);
    await this.#end(conversationId, session).catch((err) =>
      this.#logger.warn('session_closed not stored; deleting anyway', {
        conversation_id: conversationId,
        ...errorFields(err),
      }),
    );
    this.#live.delete(conversationId);
    await session?.close('deleted');
    await this.#purge(conversationId, user);
  }

  /**
   * Removes everything kept of a conversation: events, snapshot, checkpoints,
   * record and marker, secrets, owner record; and its workspace when it was
   * never answered (`unanswered`: half a fork or a creation; a deleted
   * conversation's workspace stays).
   */
  async #purge(conversationId: string, user: string, unanswered = false): Promise<void> {
    if (unanswered) await this.#deps.runtimes.removeWorkspace?.(conversationId);
    await this.#deps.log.purge(conversationId);
    await this.#deps.snapshots.delete(conversationId);
    await this.#checkpoints.purge(conversationId);
    await this.#deps.conversations.delete(user, conversationId);
    await this.#secrets.forget(conversationId);
    await this.#ownership.release(conversationId);
  }

  #newId(): string {
    return this.#deps.newId?.() ?? randomUUID().replaceAll('-', '');
  }

  isLive(conversationId: string): boolean {
    return this.#live.has(conversationId);
  }

  get liveCount(): number {
    return this.#live.size;
  }

  /** Running totals for the metrics: owner records held, takeovers, requests forwarded to owners. */
  get clusterCounts(): { owned: number; takeovers: number; forwarded: number } {
    const ownership = this.#ownership;
    return ownership instanceof ClusterOwnership
      ? { owned: ownership.owned, takeovers: ownership.takeovers, forwarded: this.#router.forwarded }
      : { owned: this.liveCount, takeovers: 0, forwarded: 0 };
  }

  /**
   * After a restart: brings back every conversation whose log ends in the
   * middle of a task, so it finishes by itself. Returns how many came back.
   * Only conversations with a work marker (in memory or possibly busy when
   * the last process stopped) are looked at, and only the unsettled ones' logs
   * are read: an idle conversation costs no log read. In a cluster only the
   * markers of conversations whose owner is gone (or this node) are taken:
   * each is claimed first, and given up again when it was idle. One recovery
   * runs at a time; one asked for meanwhile runs after it.
   */
  recover(): Promise<number> {
    return this.#recovery.run();
  }

  /**
   * Passivates every live session (snapshots written), then stops. In a
   * cluster this is a drain: no new conversation starts here, running
   * commands get up to one lease to finish, and each session's ownership is
   * given up as it leaves, so other nodes take its clients and its work.
   */
  async shutdown(): Promise<void> {
    this.#draining = true;
    this.#recovery.stop();
    this.#policy.stop();
    const ownership = this.#ownership;
    if (ownership instanceof ClusterOwnership) {
      ownership.leave();
      await this.#commandsDone(ownership.leaseMs);
    }
    await Promise.allSettled([...this.#live.keys()].map((id) => this.passivate(id, 'shutdown')));
    const rest = [...this.#live.values()];
    this.#live.clear();
    await Promise.allSettled(rest.map((s) => s.close('server shutting down')));
    await this.#recovery.settled();
    await this.#stopServing?.();
    if (ownership instanceof ClusterOwnership) await ownership.stop({ leave: true });
    this.feed.stop();
  }

  /** Waits until no live session has a command out, for at most `ms`. */
  async #commandsDone(ms: number): Promise<void> {
    const until = performance.now() + ms;
    const running = () => [...this.#live.values()].some((s) => !s.closed && s.snapshot?.context.pendingCommand);
    while (running() && performance.now() < until) await new Promise((resolve) => setTimeout(resolve, 25));
  }

  /** The lease lapsed: every session stops at once and writes nothing (another node may own it now). */
  #dropAll(reason: string): void {
    const sessions = [...this.#live.values()];
    this.#live.clear();
    for (const session of sessions) {
      this.#ownership.forget(session.conversationId);
      void session.close(reason);
    }
    if (sessions.length > 0) this.#logger.warn('sessions stopped', { count: sessions.length, reason });
  }

  /** Stores `session_closed` through the live session, or through one rebuilt from the log (no effect runs). */
  async #end(id: string, live: Session | undefined): Promise<void> {
    if (live && !live.closed) return live.end('deleted');
    const loaded = await loadSessionState(this.#deps.log, this.#deps.snapshots, id);
    // No events, or it ended already (a delete that stopped before its purge).
    if (!loaded || loaded.state.snapshot.status !== 'active') return;
    await Session.endStored(id, this.#sessionDeps(id), loaded.state, 'deleted');
  }

  #reconnectRuntime(conversationId: string, user: string): void {
    this.#logger.info('reconnecting a dead runtime', { conversation_id: conversationId });
    void this.act(conversationId, user, { type: 'reconnect_runtime' }).catch((err: unknown) =>
      // Another connection's reconnect may have come first: this one is then refused, as it should be.
      err instanceof IllegalTransitionError
        ? undefined
        : this.#logger.warn('runtime reconnect failed', { conversation_id: conversationId, ...errorFields(err) }),
    );
  }

  #load(entry: ConversationEntry): Promise<Session> {
    const id = entry.conversation_id;
    const live = this.#live.get(id);
    if (live && !live.closed) return Promise.resolve(live);
    let loading = this.#loading.get(id);
    if (!loading) {
      const leaving = this.#leaving.get(id) ?? Promise.resolve();
      loading = leaving
        .then(() => this.#rehydrations(() => this.#rehydrate(entry)))
        .finally(() => this.#loading.delete(id));
      this.#loading.set(id, loading);
    }
    return loading;
  }

  async #rehydrate(entry: ConversationEntry): Promise<Session> {
    const id = entry.conversation_id;
    const loaded = await loadSessionState(this.#deps.log, this.#deps.snapshots, id);
    // A conversation that ended (deleted, its purge not done) does not come back.
    if (!loaded || loaded.state.snapshot.status !== 'active') throw new ConversationNotFoundError(id);
    await this.#secrets.load(id);
    const session = await Session.restore(id, this.#sessionDeps(id, entry), loaded.state, loaded.from, loaded.folded);
    this.#live.set(id, session);
    this.#logger.info('session rehydrated', {
      conversation_id: id,
      from: loaded.from,
      folded: loaded.folded,
      state: session.state,
    });
    return session;
  }

  #claimStep<T>(conversationId: string, work: () => Promise<T>): Promise<T> {
    const step = (this.#claims.get(conversationId) ?? Promise.resolve()).then(work);
    const tail = step.catch(() => undefined);
    this.#claims.set(conversationId, tail);
    void tail.then(() => {
      if (this.#claims.get(conversationId) === tail) this.#claims.delete(conversationId);
    });
    return step;
  }

  /** `known`: the conversation's index entry, when it has one (not yet at creation). */
  #sessionDeps(conversationId: string, known?: ConversationEntry): SessionDeps {
    return {
      log: this.#deps.log,
      status: this.#status,
      snapshots: this.#deps.snapshots,
      snapshotEvery: this.limits.snapshotEvery,
      checkpoints: this.#checkpoints,
      checkpointEvery: this.limits.checkpointEvery,
      startWaitMs: this.limits.startTimeoutMs,
      agent: replayable(this.#deps.agentFor(conversationId)),
      runtimes: this.#deps.runtimes,
      clock: this.#clock,
      logger: this.#logger,
      secrets: this.#secrets.of(conversationId),
      commandTimeoutMs: this.#deps.commandTimeoutMs,
      leaseValid: this.#ownership.clustered ? () => this.#ownership.leaseValid() : undefined,
      onApplied: (session, before) => {
        this.#policy.applied(session, before);
        const since = session.runningSince;
        if (this.#ownership.clustered && since !== null && since !== (before?.context.runningSince ?? null))
          void this.#router
            .capAcrossCluster(session)
            .catch((err: unknown) =>
              this.#logger.warn('the per-user cap across the cluster was not checked', errorFields(err)),
            );
      },
      index: new SessionIndex(conversationId, this.#deps.conversations, this.#logger, known),
      onClosed: (session) => {
        if (this.#live.get(conversationId) === session && !this.#leaving.has(conversationId))
          this.#live.delete(conversationId);
      },
    };
  }
}
