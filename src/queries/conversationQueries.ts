import type {
  ClusterView,
  ConversationInfo,
  ConversationOwner,
  ConversationState,
  ListPosition,
} from '../../protocol/index.ts';
import type { Ownership } from '../cluster/ownership.ts';
import type { ReadPage } from '../store/index.ts';
import type { ConversationPage, ConversationReads } from './conversationReads.ts';

/** What the server may read of a user's conversations. Nothing here stores anything or brings a conversation into memory. */
export interface ConversationQueries {
  /** One page of the user's conversations, newest first. */
  list(user: string, page: { limit: number; after?: ListPosition }): Promise<ConversationPage>;
  /** A conversation as it stands, and the node that runs it. */
  info(conversationId: string, user: string): Promise<ConversationInfo>;
  events(conversationId: string, user: string, page: { afterSeq: number; limit: number }): Promise<ReadPage>;
  /** The conversation right after its event at `atSeq` (default: its last): a pure fold. */
  stateAt(conversationId: string, user: string, atSeq?: number): Promise<ConversationState>;
  /** The nodes of the cluster (this process alone without one), and which one answers. */
  cluster(): Promise<ClusterView>;
  /** The node that runs one of the user's conversations, or null when none does. */
  ownerNode(conversationId: string, user: string): Promise<ConversationOwner>;
}

export interface HostQueriesDeps {
  reads: ConversationReads;
  ownership: Ownership;
  /** Sessions in this process's memory. */
  liveCount(): number;
  clock: () => Date;
  /** How this node's runtimes confine commands. */
  sandbox: 'bwrap' | 'none';
}

/** The node's queries: the user's index, a pure fold of the log, and the cluster's heartbeats. */
export class HostQueries implements ConversationQueries {
  readonly #deps: HostQueriesDeps;
  readonly #startedAt: string;

  constructor(deps: HostQueriesDeps) {
    this.#deps = deps;
    this.#startedAt = deps.clock().toISOString();
  }

  list(user: string, page: { limit: number; after?: ListPosition }): Promise<ConversationPage> {
    return this.#deps.reads.list(user, page);
  }

  async info(conversationId: string, user: string): Promise<ConversationInfo> {
    const info = await this.#deps.reads.info(conversationId, user);
    return { ...info, owner: await this.#deps.ownership.ownerOf(conversationId), sandbox: this.#deps.sandbox };
  }

  events(conversationId: string, user: string, page: { afterSeq: number; limit: number }): Promise<ReadPage> {
    return this.#deps.reads.events(conversationId, user, page);
  }

  stateAt(conversationId: string, user: string, atSeq?: number): Promise<ConversationState> {
    return this.#deps.reads.stateAt(conversationId, user, atSeq);
  }

  async cluster(): Promise<ClusterView> {
    const { ownership, clock } = this.#deps;
    const nodes = ownership.clustered
      ? await ownership.describeNodes()
      : [
          {
            node_id: ownership.nodeId,
            url: null,
            live_sessions: this.#deps.liveCount(),
            started_at: this.#startedAt,
            last_heartbeat: clock().toISOString(),
          },
        ];
    return { node_id: ownership.nodeId, nodes };
  }

  async ownerNode(conversationId: string, user: string): Promise<ConversationOwner> {
    await this.#deps.reads.entryOf(conversationId, user);
    const owner = await this.#deps.ownership.ownerOf(conversationId);
    const node = owner === null ? null : (await this.cluster()).nodes.find((n) => n.node_id === owner);
    // An owner whose heartbeat aged out between the two reads runs nothing any more.
    return { conversation_id: conversationId, owner: node ?? null };
  }
}
