import { DEFAULT_RATE_LIMIT_RETRIES } from '../../machines/index.ts';
import type { Agent } from '../agent/index.ts';
import type { Logger } from '../logger.ts';
import type { RuntimeProvider } from '../runtime/index.ts';
import type { McpHub } from '../mcp/index.ts';
import type {
  CheckpointStore,
  ClusterBus,
  ConversationStore,
  DeltaChannel,
  EventLog,
  SecretStore,
  SnapshotStore,
  StatusChannel,
} from '../store/index.ts';
import type { Ownership } from '../cluster/ownership.ts';
import type { PassivationLimits } from './passivationPolicy.ts';

/** Attempts of one agent step when TETHER_MAX_ATTEMPTS is not set. */
export const DEFAULT_MAX_ATTEMPTS = 3;

export interface SessionLimits extends PassivationLimits {
  /** A session that has not started this long after creation reports error. */
  startTimeoutMs: number;
  /** How long a repository's clone may take; added to the start deadline of a conversation that has one. */
  cloneTimeoutMs: number;
  /** Rate-limited attempts of one agent step before it gives up in error; recorded in each new conversation's creation. */
  rateLimitRetries: number;
  /** Attempts one agent step may take (a rate limit, a failing server, a cut stream, its owner lost); recorded in each new conversation's creation. */
  maxAttempts: number;
  /** Snapshot every this many events, besides at passivation. */
  snapshotEvery: number;
  /** A checkpoint (for looks at past states) every this many events of a conversation. */
  checkpointEvery: number;
  /** Rehydrations running at once; further ones (and their actions) wait their turn. */
  rehydrateConcurrency: number;
}

export const DEFAULT_LIMITS: SessionLimits = {
  closeDelayMs: 120_000,
  idleMs: 900_000,
  maxLive: 10_000,
  maxRunningPerUser: 3,
  startTimeoutMs: 60_000,
  cloneTimeoutMs: 120_000,
  rateLimitRetries: DEFAULT_RATE_LIMIT_RETRIES,
  maxAttempts: DEFAULT_MAX_ATTEMPTS,
  snapshotEvery: 200,
  checkpointEvery: 100,
  rehydrateConcurrency: 8,
};

/** What a node's host is built from: the stores, runtimes and agents, and its settings. */
export interface HostDeps {
  log: EventLog;
  conversations: ConversationStore;
  snapshots: SnapshotStore;
  /** Checkpoints for looks at past states (default: in this process's memory). */
  checkpoints?: CheckpointStore;
  /** Status frames between nodes (default: in this process only). */
  status?: StatusChannel;
  /** Deltas of agent replies between nodes (default: in this process only). */
  deltas?: DeltaChannel;
  /** The wait before an agent step's next attempt after a failing server, doubled each attempt (default 500 ms). */
  agentRetryBaseMs?: number;
  runtimes: RuntimeProvider;
  /** The agent for a conversation (the scripted agent unless an LLM is configured). */
  agentFor: (conversationId: string) => Agent;
  limits?: Partial<SessionLimits>;
  clock?: () => Date;
  newId?: () => string;
  logger?: Logger;
  commandTimeoutMs?: number;
  /** The node's MCP servers, started per conversation with its runtime (none: no MCP tools). */
  mcp?: McpHub;
  /** TETHER_CONFIRM_UNKNOWN (default true). */
  confirmUnknown?: boolean;
  /** Which node runs each conversation (default: this process runs them all). */
  ownership?: Ownership;
  /** How actions reach a conversation's owner on another node (needed with a clustered ownership). */
  bus?: ClusterBus;
  /**
   * Where secrets are kept besides this process's memory: sealed in a store
   * any node can read, or 'refuse' (a cluster without a key: a conversation
   * with secrets could not start its runtime on another node). Default: memory only.
   */
  secrets?: SecretStore | 'refuse';
}
