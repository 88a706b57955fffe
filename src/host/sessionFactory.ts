import { replayable } from '../agent/index.ts';
import type { SessionSnapshot } from '../../machines/index.ts';
import type { Logger } from '../logger.ts';
import type { Ownership } from '../cluster/ownership.ts';
import type { Session, SessionDeps } from '../conversation/session.ts';
import { SessionIndex } from '../conversation/sessionIndex.ts';
import type { CheckpointStore, ConversationEntry, DeltaChannel, StatusChannel } from '../store/index.ts';
import type { HostDeps, SessionLimits } from './hostDeps.ts';
import type { SecretKeeper } from './secretKeeper.ts';

/** What the node's host is told about each of its sessions. */
export interface SessionHooks {
  /** After every decision took effect, with the snapshot before it. */
  applied(session: Session, before: SessionSnapshot | undefined): void;
  /** Once, when the session is released. */
  released(session: Session): void;
}

export interface SessionFactoryDeps {
  host: HostDeps;
  limits: SessionLimits;
  status: StatusChannel;
  deltas: DeltaChannel;
  checkpoints: CheckpointStore;
  ownership: Ownership;
  secrets: SecretKeeper;
  logger: Logger;
  clock: () => Date;
  hooks: SessionHooks;
}

/** The dependencies of each conversation's session on this node, made in one place. */
export class SessionFactory {
  readonly #deps: SessionFactoryDeps;

  constructor(deps: SessionFactoryDeps) {
    this.#deps = deps;
  }

  /** `known`: the conversation's index entry, when it has one (not yet at creation). */
  depsFor(conversationId: string, known?: ConversationEntry): SessionDeps {
    const { host, limits, ownership, hooks, logger } = this.#deps;
    return {
      log: host.log,
      status: this.#deps.status,
      deltas: this.#deps.deltas,
      retryBaseMs: host.agentRetryBaseMs,
      snapshots: host.snapshots,
      snapshotEvery: limits.snapshotEvery,
      checkpoints: this.#deps.checkpoints,
      checkpointEvery: limits.checkpointEvery,
      startWaitMs: limits.startTimeoutMs + limits.cloneTimeoutMs,
      agent: replayable(host.agentFor(conversationId)),
      runtimes: host.runtimes,
      clock: this.#deps.clock,
      logger,
      secrets: this.#deps.secrets.of(conversationId),
      commandTimeoutMs: host.commandTimeoutMs,
      mcp: host.mcp,
      confirmUnknown: host.confirmUnknown,
      cloneTimeoutMs: limits.cloneTimeoutMs,
      leaseValid: ownership.clustered ? () => ownership.leaseValid() : undefined,
      onApplied: (session, before) => hooks.applied(session, before),
      index: new SessionIndex(conversationId, host.conversations, logger, known),
      onReleased: (session) => hooks.released(session),
    };
  }
}
