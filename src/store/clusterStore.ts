import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, JetStreamApiCodes, JetStreamApiError, type JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { z } from 'zod';
import { assertConversationId } from './assertConversationId.ts';
import { StoreSettingsError } from './errors.ts';
import { toStoreError } from './natsErrors.ts';
import { isWrongLastSequence, removeKey } from './kvRemove.ts';
import { openBucket, type Replication } from './streamSettings.ts';

export const DEFAULT_NODES_BUCKET = 'tether_nodes';
export const DEFAULT_OWNERS_BUCKET = 'tether_owners';

/** Which node runs a conversation; `generation` grows by one at every claim. */
export const OwnerRecord = z.object({ node_id: z.string().min(1), generation: z.number().int().min(1) });
export type OwnerRecord = z.infer<typeof OwnerRecord>;

/** An owner record and the revision it was read at (the compare-and-set's expected value). */
export interface OwnerRead {
  record: OwnerRecord;
  revision: number;
}

/** What a node's heartbeat says about it. */
export const NodeBeat = z.object({
  node_id: z.string().min(1),
  started_at: z.string(),
  /** Where clients reach it (TETHER_PUBLIC_URL, or its host and port). */
  url: z.string().nullable().default(null),
  /** Sessions in its memory when it renewed. */
  live_sessions: z.number().int().min(0).default(0),
});
export type NodeBeat = z.input<typeof NodeBeat>;

/** A node whose heartbeat is current, as its last heartbeat described it. */
export interface NodeView extends z.output<typeof NodeBeat> {
  /** When the store got that heartbeat. */
  last_heartbeat: string;
}

/**
 * The shared state of a cluster: one heartbeat key per node, which ages out
 * one lease after its last renewal, and one owner record per conversation
 * that some node runs (or ran until it died). Every read here goes to the
 * stream leader: an ownership decision must never rest on a stale replica.
 */
export interface ClusterStore {
  /** Renews this node's heartbeat. */
  beat(beat: NodeBeat): Promise<void>;
  /** Removes this node's heartbeat (a drained node leaves at once, without waiting for it to age out). */
  leave(nodeId: string): Promise<void>;
  /** Whether the node's heartbeat is current. */
  alive(nodeId: string): Promise<boolean>;
  /** The nodes whose heartbeat is current. */
  nodes(): Promise<string[]>;
  /** The same nodes with what their last heartbeat said, ordered by id. */
  describeNodes(): Promise<NodeView[]>;
  owner(conversationId: string): Promise<OwnerRead | null>;
  /**
   * Compare-and-set: creates the record when `revision` is null (absent or
   * deleted), else replaces it only if it is still at `revision`. The new
   * revision, or null when another node changed it first.
   */
  claim(conversationId: string, record: OwnerRecord, revision: number | null): Promise<number | null>;
  /** Deletes the record if it is still at `revision`; false when it moved on. */
  release(conversationId: string, revision: number): Promise<boolean>;
  /** Removes the record, and any delete marker of it, whoever holds it (the conversation is deleted). */
  erase(conversationId: string): Promise<void>;
}

const beatKey = (nodeId: string) => `n.${Buffer.from(nodeId).toString('base64url')}`;

/** The cluster's state in two KV buckets: heartbeats (TTL one lease) and owner records. */
export class KvClusterStore implements ClusterStore {
  #nodes: KV;
  readonly #owners: KV;
  readonly #jsm: JetStreamManager;
  readonly #nodesBucket: string;
  readonly #reopenNodes: () => Promise<KV>;
  #reopen = false;

  /** `reopenNodes` makes the heartbeat bucket again, after a failed renewal (a nats-server that lost it). */
  constructor(
    buckets: { nodes: KV; owners: KV; nodesBucket: string },
    jsm: JetStreamManager,
    reopenNodes: () => Promise<KV>,
  ) {
    this.#nodes = buckets.nodes;
    this.#owners = buckets.owners;
    this.#nodesBucket = buckets.nodesBucket;
    this.#jsm = jsm;
    this.#reopenNodes = reopenNodes;
  }

  get #stream(): string {
    return `KV_${this.#nodesBucket}`;
  }

  async beat(beat: NodeBeat): Promise<void> {
    try {
      if (this.#reopen) {
        this.#nodes = await this.#reopenNodes();
        this.#reopen = false;
      }
      await this.#nodes.put(beatKey(beat.node_id), JSON.stringify(beat));
    } catch (err) {
      // The bucket may be gone with a server that restarted empty: the next renewal makes it again.
      this.#reopen = true;
      throw toStoreError(err, 'renewing the heartbeat');
    }
  }

  async leave(nodeId: string): Promise<void> {
    try {
      // A stream purge of the key's subject leaves no marker behind: the node is gone from the listing at once.
      await this.#jsm.streams.purge(this.#stream, { filter: `$KV.${this.#nodesBucket}.${beatKey(nodeId)}` });
    } catch (err) {
      throw toStoreError(err, 'removing the heartbeat');
    }
  }

  async alive(nodeId: string): Promise<boolean> {
    try {
      const entry = await this.#nodes.get(beatKey(nodeId));
      return entry !== null && entry.operation === 'PUT';
    } catch (err) {
      throw toStoreError(err, 'reading a heartbeat');
    }
  }

  async nodes(): Promise<string[]> {
    // The stream's subjects, from its leader. (A KV key listing is a consumer that waits for every message
    // it counted at its start, and heartbeats age out meanwhile: it could wait for ever.)
    const prefix = `$KV.${this.#nodesBucket}.n.`;
    try {
      const info = await this.#jsm.streams.info(this.#stream, { subjects_filter: `${prefix}*` });
      return Object.keys(info.state.subjects ?? {}).map((subject) =>
        Buffer.from(subject.slice(prefix.length), 'base64url').toString(),
      );
    } catch (err) {
      throw toStoreError(err, 'listing the nodes');
    }
  }

  async describeNodes(): Promise<NodeView[]> {
    const ids = await this.nodes();
    const views = await Promise.all(
      ids.map(async (nodeId) => {
        let entry;
        try {
          entry = await this.#nodes.get(beatKey(nodeId));
        } catch (err) {
          throw toStoreError(err, 'reading a heartbeat');
        }
        // Aged out or left between the listing and the read: not a current node.
        if (entry === null || entry.operation !== 'PUT') return null;
        const beat = NodeBeat.safeParse(safeJson(() => entry.json()));
        const fields = beat.success ? beat.data : NodeBeat.parse({ node_id: nodeId, started_at: '' });
        return { ...fields, node_id: nodeId, last_heartbeat: entry.created.toISOString() };
      }),
    );
    return views.filter((view) => view !== null).sort((a, b) => a.node_id.localeCompare(b.node_id));
  }

  async owner(conversationId: string): Promise<OwnerRead | null> {
    assertConversationId(conversationId);
    let entry;
    try {
      entry = await this.#owners.get(conversationId);
    } catch (err) {
      throw toStoreError(err, `reading the owner of ${conversationId}`);
    }
    if (entry === null || entry.operation !== 'PUT') return null;
    const parsed = OwnerRecord.safeParse(safeJson(() => entry.json()));
    // A record that does not parse is as good as none; a claim replaces it at its revision.
    return parsed.success
      ? { record: parsed.data, revision: entry.revision }
      : { record: { node_id: '', generation: 1 }, revision: entry.revision };
  }

  async claim(conversationId: string, record: OwnerRecord, revision: number | null): Promise<number | null> {
    assertConversationId(conversationId);
    try {
      return revision === null
        ? await this.#owners.create(conversationId, JSON.stringify(record))
        : await this.#owners.update(conversationId, JSON.stringify(record), revision);
    } catch (err) {
      if (isWrongLastSequence(err)) return null;
      throw toStoreError(err, `claiming ${conversationId}`);
    }
  }

  async release(conversationId: string, revision: number): Promise<boolean> {
    assertConversationId(conversationId);
    try {
      await this.#owners.delete(conversationId, { previousSeq: revision });
      return true;
    } catch (err) {
      if (isWrongLastSequence(err)) return false;
      throw toStoreError(err, `releasing ${conversationId}`);
    }
  }

  async erase(conversationId: string): Promise<void> {
    assertConversationId(conversationId);
    try {
      await removeKey(this.#owners, conversationId);
    } catch (err) {
      throw toStoreError(err, `erasing the owner of ${conversationId}`);
    }
  }
}

function safeJson(read: () => unknown): unknown {
  try {
    return read();
  } catch {
    return undefined;
  }
}

export interface KvClusterStoreOptions extends Replication {
  /** A heartbeat ages out this long after its last renewal. */
  leaseMs: number;
  nodesBucket?: string;
  ownersBucket?: string;
}

/**
 * Opens (creating when missing) the heartbeat and owner buckets. Both are
 * read without direct get, so every read is answered by the stream leader.
 */
export async function kvClusterStore(nc: NatsConnection, options: KvClusterStoreOptions): Promise<KvClusterStore> {
  const nodesBucket = options.nodesBucket ?? DEFAULT_NODES_BUCKET;
  const { replicas } = options;
  await refuseAnotherLease(nc, nodesBucket, options.leaseMs);
  // The heartbeats' TTL is the lease: a start brings it to this node's TETHER_LEASE_MS.
  const openNodes = () => openBucket(nc, nodesBucket, { replicas, ttlMs: options.leaseMs, allowDirect: false });
  try {
    const [nodes, owners] = await Promise.all([
      openNodes(),
      openBucket(nc, options.ownersBucket ?? DEFAULT_OWNERS_BUCKET, { replicas, allowDirect: false }),
    ]);
    return new KvClusterStore({ nodes, owners, nodesBucket }, await jetstreamManager(nc), openNodes);
  } catch (err) {
    throw toStoreError(err, 'opening the cluster buckets');
  }
}

/**
 * Refuses a lease other than the heartbeat bucket's TTL while heartbeats are
 * current: the nodes that wrote them renew at their own lease's pace, and a
 * shorter TTL would age them out between renewals. (Waitable: a node
 * restarted with a new lease waits for its own old heartbeat to age out.)
 */
async function refuseAnotherLease(nc: NatsConnection, bucket: string, leaseMs: number): Promise<void> {
  const stream = `KV_${bucket}`;
  let info;
  try {
    const jsm = await jetstreamManager(nc, { checkAPI: false });
    info = await jsm.streams.info(stream, { subjects_filter: `$KV.${bucket}.n.*` });
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return;
    throw toStoreError(err, 'reading the heartbeat bucket');
  }
  const beating = Object.keys(info.state.subjects ?? {}).length;
  if (info.config.max_age === leaseMs * 1e6 || beating === 0) return;
  const reason = `${beating} node(s) with that lease have a current heartbeat: every node must use the same lease`;
  const err = new StoreSettingsError(stream, 'ttl', `${info.config.max_age / 1e6} ms`, `${leaseMs} ms`, reason);
  err.waitable = true;
  throw err;
}

/** The in-process twin: heartbeats age out on the wall clock; revisions count every change. */
export function memoryClusterStore(leaseMs: number, now: () => number = () => performance.now()): ClusterStore {
  const beats = new Map<string, { at: number; wall: Date; beat: NodeBeat }>();
  const owners = new Map<string, OwnerRead>();
  let revision = 0;
  const alive = (nodeId: string) => {
    const at = beats.get(nodeId)?.at;
    return at !== undefined && now() - at < leaseMs;
  };
  return {
    beat: async (beat) => void beats.set(beat.node_id, { at: now(), wall: new Date(), beat }),
    leave: async (nodeId) => void beats.delete(nodeId),
    alive: async (nodeId) => alive(nodeId),
    nodes: async () => [...beats.keys()].filter(alive),
    describeNodes: async () =>
      [...beats.entries()]
        .filter(([nodeId]) => alive(nodeId))
        .map(([, { wall, beat }]) => ({ ...NodeBeat.parse(beat), last_heartbeat: wall.toISOString() }))
        .sort((a, b) => a.node_id.localeCompare(b.node_id)),
    owner: async (id) => owners.get(id) ?? null,
    claim: async (id, record, expected) => {
      if ((owners.get(id)?.revision ?? null) !== expected) return null;
      revision += 1;
      owners.set(id, { record, revision });
      return revision;
    },
    release: async (id, expected) => {
      if (owners.get(id)?.revision !== expected) return false;
      owners.delete(id);
      return true;
    },
    erase: async (id) => void owners.delete(id),
  };
}
