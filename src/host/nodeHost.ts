import { randomUUID } from 'node:crypto';
import type { PassivationReason } from '../../protocol/index.ts';
import { ClusterRouter } from '../cluster/clusterRouter.ts';
import { ClusterOwnership, soloOwnership, type Ownership } from '../cluster/ownership.ts';
import type { Session } from '../conversation/session.ts';
import { maskingLogger } from '../conversation/secretMasker.ts';
import { errorFields, silentLogger, type Logger } from '../logger.ts';
import { ConversationFeed } from '../queries/conversationFeed.ts';
import { HostQueries, type ConversationQueries } from '../queries/conversationQueries.ts';
import { ConversationReads } from '../queries/conversationReads.ts';
import { memoryCheckpointStore, memoryDeltaChannel, memoryStatusChannel } from '../store/index.ts';
import { capAcrossCluster } from './clusterCap.ts';
import { HostCommands } from './conversationCommands.ts';
import { ConversationPurge } from './conversationPurge.ts';
import { ConversationForks } from './forking.ts';
import { DEFAULT_LIMITS, type HostDeps, type SessionLimits } from './hostDeps.ts';
import { LiveSessions } from './liveSessions.ts';
import { PassivationPolicy } from './passivationPolicy.ts';
import { SecretKeeper } from './secretKeeper.ts';
import { SessionFactory } from './sessionFactory.ts';
import { WorkRecovery } from './workRecovery.ts';

/**
 * A node's host: the sessions it holds, when they leave memory, recovery
 * after a crash, and its place in the cluster. The server sees it through
 * `commands`, `queries` and the live `feed`; this class only builds the rooms
 * and runs the node's lifecycle (join, drain, shutdown).
 */
export class NodeHost {
  readonly commands: HostCommands;
  readonly queries: ConversationQueries;
  readonly feed: ConversationFeed;
  readonly limits: SessionLimits;
  readonly #deps: HostDeps;
  readonly #logger: Logger;
  readonly #ownership: Ownership;
  readonly #live: LiveSessions;
  readonly #policy: PassivationPolicy;
  readonly #recovery: WorkRecovery;
  readonly #router: ClusterRouter;
  #stopServing: (() => Promise<void>) | null = null;

  constructor(deps: HostDeps) {
    this.#deps = deps;
    const ownership = (this.#ownership = deps.ownership ?? soloOwnership);
    const limits = (this.limits = { ...DEFAULT_LIMITS, ...deps.limits });
    const clock = deps.clock ?? (() => new Date());
    const newId = () => deps.newId?.() ?? randomUUID().replaceAll('-', '');
    const secrets = new SecretKeeper(deps.secrets);
    const logger = (this.#logger = maskingLogger(deps.logger ?? silentLogger, () => secrets.values()));
    const status = deps.status ?? memoryStatusChannel();
    const deltas = deps.deltas ?? memoryDeltaChannel();
    const checkpoints = deps.checkpoints ?? memoryCheckpointStore();
    this.feed = new ConversationFeed(deps.log, status, {
      channel: deltas,
      catchUp: (id) => this.#router.deltas(id),
    });
    const factory = new SessionFactory({
      host: deps,
      limits,
      status,
      // This node's clients get its sessions' deltas in process, every other node's over NATS.
      deltas: {
        publish: (id, delta) => {
          this.feed.deliverLocal(id, delta);
          deltas.publish(id, delta);
        },
        subscribe: (onDelta) => deltas.subscribe(onDelta),
      },
      checkpoints,
      ownership,
      secrets,
      logger,
      clock,
      hooks: {
        applied: (session, before) => {
          this.#policy.applied(session, before);
          const since = session.runningSince;
          if (ownership.clustered && since !== null && since !== (before?.context.runningSince ?? null))
            void capAcrossCluster(session, capDeps()).catch((err: unknown) =>
              logger.warn('the per-user cap across the cluster was not checked', errorFields(err)),
            );
        },
        released: (session) => this.#live.released(session),
      },
    });
    const live = (this.#live = new LiveSessions({
      ...deps,
      ownership,
      secrets,
      logger,
      rehydrateConcurrency: limits.rehydrateConcurrency,
      sessionDeps: (id, known) => factory.depsFor(id, known),
    }));
    const capDeps = () => ({
      live,
      conversations: deps.conversations,
      router: this.#router,
      status,
      logger,
      maxRunningPerUser: limits.maxRunningPerUser,
    });
    const reads = new ConversationReads({ ...deps, checkpoints }, (id) => live.get(id));
    const sandbox = deps.runtimes.sandbox ?? 'none';
    this.queries = new HostQueries({ reads, ownership, liveCount: () => live.size, clock, sandbox });
    const purge = new ConversationPurge({ ...deps, checkpoints, secrets, ownership, logger });
    const forks = new ConversationForks({
      ...deps,
      checkpoints,
      reads,
      ownership,
      secrets,
      logger,
      clock,
      newId,
      checkpointEvery: limits.checkpointEvery,
      sessionDeps: (id, known) => factory.depsFor(id, known),
      adopt: (session) => {
        live.adopt(session);
        // Copied while the node began to drain: it leaves with the others.
        if (this.commands.draining) void live.passivate(session.conversationId, 'shutdown');
      },
      purge: (id, user) => purge.purge(id, user, false),
    });
    this.#router = new ClusterRouter(
      {
        isLive: (id) => live.get(id) !== undefined,
        deltasHere: (id) => live.get(id)?.currentDeltas() ?? null,
        actHere: (id, user, action, clientId) => this.commands.actHere(id, user, action, clientId),
        deleteHere: (id, user, keepWorkspace) => this.commands.deleteHere(id, user, keepWorkspace),
        passivate: (id, reason) => live.passivate(id, reason),
        storedElsewhere: (id, seq) => deps.log.expectDelivery?.(id, seq),
      },
      { ownership, bus: deps.bus },
    );
    this.commands = new HostCommands({
      host: deps,
      limits,
      live,
      reads,
      router: this.#router,
      forks,
      purge,
      factory,
      ownership,
      secrets,
      logger,
      newId,
    });
    this.#policy = new PassivationPolicy(
      {
        live: () => live.values(),
        connections: (id) => this.feed.count(id),
        passivate: (session, reason) => live.passivate(session.conversationId, reason),
        notify: (id, frame) => status.publish(id, frame),
      },
      limits,
      () => clock().getTime(),
    );
    this.#policy.start();
    this.#recovery = new WorkRecovery(
      {
        here: (id) => live.has(id) || this.commands.creating(id) || forks.copying(id),
        rehydrate: (entry) => live.rehydrate(entry),
        exclusive: (id, work) => live.exclusive(id, work),
      },
      {
        ...deps,
        ownership,
        logger,
        concurrency: limits.rehydrateConcurrency,
        purge: (id, user) => purge.purge(id, user, false),
        finishDelete: (record) => purge.finish(record),
      },
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
      lapsed: () => this.#live.dropAll('the lease lapsed'),
      recover: (reason) => {
        this.#logger.info('looking for unfinished conversations', { reason });
        void this.recover().catch((err: unknown) => this.#logger.error('recovery failed', errorFields(err)));
      },
      liveSessions: () => this.liveCount,
    });
    this.#stopServing = this.#deps.bus?.serve(ownership.nodeId, (request) => this.#router.serve(request)) ?? null;
  }

  /** The live session of the user's conversation, rehydrated here when needed. */
  session(conversationId: string, user: string): Promise<Session> {
    return this.commands.session(conversationId, user);
  }

  /** Sends a session out of memory (snapshot, actor and runtime stopped, workspace kept). */
  passivate(conversationId: string, reason: PassivationReason): Promise<void> {
    return this.#live.passivate(conversationId, reason);
  }

  /** Whether the conversation's session runs in this process. */
  isLive(conversationId: string): boolean {
    return this.#live.get(conversationId) !== undefined;
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
   * middle of a task, so it finishes by itself (see WorkRecovery). Returns
   * how many came back.
   */
  recover(): Promise<number> {
    return this.#recovery.run();
  }

  /**
   * Passivates every live session (snapshots written), then stops. In a
   * cluster this is a drain: no new conversation starts here, running
   * commands and agent steps (a reply streaming) get up to one lease to
   * finish, and each session's ownership is
   * given up as it leaves, so other nodes take its clients and its work.
   */
  async shutdown(): Promise<void> {
    this.commands.draining = true;
    this.#recovery.stop();
    this.#policy.stop();
    const ownership = this.#ownership;
    if (ownership instanceof ClusterOwnership) {
      ownership.leave();
      await this.#live.workDone(ownership.leaseMs);
    }
    await this.#live.passivateAll('shutdown');
    await this.#recovery.settled();
    await this.#stopServing?.();
    if (ownership instanceof ClusterOwnership) await ownership.stop({ leave: true });
    this.feed.stop();
  }
}
