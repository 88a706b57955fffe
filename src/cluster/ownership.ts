import { TetherError } from '../errors.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { ClusterStore, NodeView, OwnerRead } from '../store/index.ts';

/** Where a conversation's session runs: here, or on the node named. */
export type Route = { local: true } | { local: false; node: string };

/** This node's lease may have lapsed: it runs nothing until its heartbeat is renewed. */
export class LeaseLapsedError extends TetherError {
  constructor(nodeId: string) {
    super('NODE_LEASE_LAPSED', `node ${nodeId} lost its lease to NATS and is getting it back: try again`);
  }
}

/**
 * Which node runs each conversation. A single process owns everything; in a
 * cluster a node owns what it claimed while its heartbeat is current.
 */
export interface Ownership {
  readonly nodeId: string;
  readonly clustered: boolean;
  /** Where the conversation runs; claims it for this node when it is free or its owner's heartbeat lapsed. */
  route(conversationId: string): Promise<Route>;
  /** The node whose current heartbeat backs the conversation's owner record, or null; claims nothing. */
  ownerOf(conversationId: string): Promise<string | null>;
  /** Claims a conversation being created here. */
  claimNew(conversationId: string): Promise<void>;
  /** Gives up a conversation that left memory here, so the node that needs it next claims it. */
  release(conversationId: string): Promise<void>;
  /** Forgets a claim without writing (the lease lapsed, or another writer took over). */
  forget(conversationId: string): void;
  /** The conversation is deleted: its owner record goes, with no delete marker left behind. */
  erase(conversationId: string): Promise<void>;
  /** Whether this node may still act as an owner: false once its lease may have lapsed. Cheap: no I/O. */
  leaseValid(): boolean;
  /** The nodes whose heartbeat is current, as they described themselves; none without a cluster. */
  describeNodes(): Promise<NodeView[]>;
}

/** One process, no cluster: it owns every conversation. */
export const soloOwnership: Ownership = {
  nodeId: 'solo',
  clustered: false,
  route: async () => ({ local: true }),
  ownerOf: async () => 'solo',
  claimNew: async () => undefined,
  release: async () => undefined,
  forget: () => undefined,
  erase: async () => undefined,
  leaseValid: () => true,
  describeNodes: async () => [],
};

export interface ClusterOwnershipOptions {
  nodeId: string;
  leaseMs: number;
  store: ClusterStore;
  logger: Logger;
  /** Where clients reach this node, told in its heartbeat (TETHER_PUBLIC_URL); default none. */
  url?: string | null;
  /** A monotonic clock in ms (default performance.now). */
  now?: () => number;
}

export interface OwnershipEvents {
  /** The lease may have lapsed: every session must stop at once, writing nothing. */
  lapsed(): void;
  /** The lease is back after a lapse, or some nodes' heartbeats lapsed: unfinished conversations need an owner. */
  recover(reason: string): void;
  /** Sessions in memory now, told in each heartbeat. */
  liveSessions(): number;
}

/** How much of the lease a node trusts: its own view lapses before any other node may claim. */
const TRUSTED_SHARE = 0.9;

/**
 * Ownership in a cluster. The node renews its heartbeat every lease/4 and
 * trusts its lease until 90% of a lease after the last renewal it sent (on its
 * own monotonic clock): the key ages out on the server one lease after it got
 * it, so no other node can claim before this node stopped. Every lease/4 it
 * also lists the heartbeats: a node that was there and is gone makes it look
 * for unfinished conversations to claim.
 */
export class ClusterOwnership implements Ownership {
  readonly nodeId: string;
  readonly clustered = true;
  readonly leaseMs: number;
  readonly #store: ClusterStore;
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #url: string | null;
  readonly #startedAt = new Date().toISOString();
  /** What this node claimed, at the revision it wrote. */
  readonly #held = new Map<string, OwnerRead>();
  #events: OwnershipEvents | null = null;
  #validUntil = Number.NEGATIVE_INFINITY;
  #lapsed = false;
  #known = new Set<string>();
  #ticker: NodeJS.Timeout | null = null;
  #lapseTimer: NodeJS.Timeout | null = null;
  #ticking: Promise<void> = Promise.resolve();
  #listing: Promise<void> | null = null;
  /** Set by a drain: this node claims nothing more. */
  #leaving = false;
  /** Takeovers of a dead node's conversations by this node. */
  takeovers = 0;

  constructor(options: ClusterOwnershipOptions) {
    this.nodeId = options.nodeId;
    this.leaseMs = options.leaseMs;
    this.#store = options.store;
    this.#logger = options.logger;
    this.#now = options.now ?? (() => performance.now());
    this.#url = options.url ?? null;
  }

  /** Renews the heartbeat once (it must work: a node that cannot reach NATS does not start), then every lease/4. */
  async start(events: OwnershipEvents): Promise<void> {
    this.#events = events;
    await this.#beat();
    this.#known = new Set(await within(this.leaseMs, this.#store.nodes(), 'listing the nodes'));
    this.#ticker = setInterval(() => {
      this.#ticking = this.#ticking.then(() => this.#tick());
    }, this.leaseMs / 4);
    this.#ticker.unref();
  }

  /** Stops renewing; `leave` also removes the heartbeat, so other nodes see this one gone at once. */
  async stop(options: { leave: boolean }): Promise<void> {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
    if (this.#lapseTimer) clearTimeout(this.#lapseTimer);
    this.#lapseTimer = null;
    await this.#ticking;
    await this.#listing;
    if (options.leave) await this.#store.leave(this.nodeId).catch(() => undefined);
    this.#validUntil = Number.NEGATIVE_INFINITY;
  }

  leaseValid(): boolean {
    return this.#now() < this.#validUntil;
  }

  describeNodes(): Promise<NodeView[]> {
    return within(this.leaseMs, this.#store.describeNodes(), 'listing the nodes');
  }

  /** How many conversations this node holds. */
  get owned(): number {
    return this.#held.size;
  }

  /** From now on this node claims nothing: what it would claim goes to another live node, which claims it. */
  leave(): void {
    this.#leaving = true;
  }

  async route(conversationId: string): Promise<Route> {
    for (let attempt = 0; attempt < 5; attempt++) {
      if (!this.leaseValid()) throw new LeaseLapsedError(this.nodeId);
      const read = await this.#store.owner(conversationId);
      const owner = read?.record.node_id;
      if (read && owner === this.nodeId && !this.#leaving) {
        this.#held.set(conversationId, read);
        return { local: true };
      }
      if (read && owner && owner !== this.nodeId && (await this.#store.alive(owner)))
        return { local: false, node: owner };
      if (this.#leaving) return this.#elsewhere(conversationId);
      const generation = (read?.record.generation ?? 0) + 1;
      const record = { node_id: this.nodeId, generation };
      const revision = await this.#store.claim(conversationId, record, read?.revision ?? null);
      if (revision === null) continue; // another node claimed it first: look again
      this.#held.set(conversationId, { record, revision });
      if (read && owner) {
        this.takeovers += 1;
        this.#logger.info('conversation taken over', { conversation_id: conversationId, from: owner, generation });
      }
      return { local: true };
    }
    throw new TetherError('OWNER_CONTENDED', `the owner of ${conversationId} kept changing: try again`);
  }

  async ownerOf(conversationId: string): Promise<string | null> {
    const owner = (await this.#store.owner(conversationId))?.record.node_id;
    return owner && (owner === this.nodeId || (await this.#store.alive(owner))) ? owner : null;
  }

  /** A draining node sends what it would have claimed to another live node. */
  async #elsewhere(conversationId: string): Promise<Route> {
    const others = (await this.#store.nodes()).filter((node) => node !== this.nodeId);
    if (others.length === 0)
      throw new TetherError('NODE_DRAINING', `no other node can take ${conversationId} now: try again`);
    return { local: false, node: others[Math.floor(Math.random() * others.length)]! };
  }

  async claimNew(conversationId: string): Promise<void> {
    if (!this.leaseValid()) throw new LeaseLapsedError(this.nodeId);
    const record = { node_id: this.nodeId, generation: 1 };
    const revision = await this.#store.claim(conversationId, record, null);
    if (revision === null) throw new TetherError('OWNER_CONTENDED', `conversation ${conversationId} is already owned`);
    this.#held.set(conversationId, { record, revision });
  }

  async release(conversationId: string): Promise<void> {
    const held = this.#held.get(conversationId);
    this.#held.delete(conversationId);
    if (!held || !this.leaseValid()) return;
    try {
      await this.#store.release(conversationId, held.revision);
    } catch (err) {
      // The record stays: the node that needs the conversation finds this one alive and forwards to it.
      this.#logger.warn('ownership not released', { conversation_id: conversationId, ...errorFields(err) });
    }
  }

  forget(conversationId: string): void {
    this.#held.delete(conversationId);
  }

  async erase(conversationId: string): Promise<void> {
    this.#held.delete(conversationId);
    await this.#store.erase(conversationId);
  }

  /**
   * One renewal, then (apart, so that a slow listing never holds the next
   * renewal back) a look at which nodes are gone. Each waits half a lease at
   * most: a renewal that does not come back in time is as good as failed.
   */
  async #tick(): Promise<void> {
    if (!this.leaseValid() && !this.#lapsed) this.#lapse();
    try {
      await within(this.leaseMs / 2, this.#beat(), 'renewing the heartbeat');
    } catch (err) {
      this.#logger.warn('heartbeat not renewed', errorFields(err));
      return;
    }
    if (this.#lapsed) {
      this.#lapsed = false;
      this.#logger.warn('lease renewed after a lapse: looking for unfinished conversations');
      this.#events?.recover('lease renewed');
    }
    this.#listing ??= this.#look().finally(() => {
      this.#listing = null;
    });
  }

  async #look(): Promise<void> {
    try {
      const now = new Set(await within(this.leaseMs / 2, this.#store.nodes(), 'listing the nodes'));
      const gone = [...this.#known].filter((node) => !now.has(node));
      this.#known = now;
      if (gone.length > 0) {
        this.#logger.info('nodes gone', { nodes: gone });
        this.#events?.recover(`node ${gone.join(', ')} gone`);
      }
    } catch (err) {
      this.#logger.warn('listing the nodes failed', errorFields(err));
    }
  }

  async #beat(): Promise<void> {
    const sentAt = this.#now();
    await this.#store.beat({
      node_id: this.nodeId,
      started_at: this.#startedAt,
      url: this.#url,
      live_sessions: this.#events?.liveSessions() ?? 0,
    });
    this.#validUntil = Math.max(this.#validUntil, sentAt + this.leaseMs * TRUSTED_SHARE);
    this.#armLapse();
  }

  /** A timer at the end of the trusted lease; one that fires a moment early (timers may) is armed again. */
  #armLapse(): void {
    if (this.#lapseTimer) clearTimeout(this.#lapseTimer);
    this.#lapseTimer = setTimeout(
      () => {
        if (this.leaseValid()) this.#armLapse();
        else if (!this.#lapsed) this.#lapse();
      },
      Math.max(1, this.#validUntil - this.#now()),
    );
    this.#lapseTimer.unref();
  }

  #lapse(): void {
    this.#lapsed = true;
    this.#logger.error('lease may have lapsed: stopping every session here', { node: this.nodeId });
    this.#held.clear();
    this.#events?.lapsed();
  }
}

/** The promise's value, or a rejection once `ms` passed (the work itself goes on, unwatched). */
function within<T>(ms: number, work: Promise<T>, doing: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${doing} took more than ${Math.round(ms)} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
