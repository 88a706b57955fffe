import pLimit, { type LimitFunction } from 'p-limit';
import { errorFields, type Logger } from '../logger.ts';
import type { PassivationReason } from '../../protocol/index.ts';
import type { Ownership } from '../cluster/ownership.ts';
import { Session, type SessionDeps } from '../conversation/session.ts';
import { readStoredState } from '../conversation/storedState.ts';
import { ConversationNotFoundError } from '../errors.ts';
import type { ConversationEntry, EventLog, SnapshotStore } from '../store/index.ts';
import type { SecretKeeper } from './secretKeeper.ts';

export interface LiveSessionsDeps {
  log: EventLog;
  snapshots: SnapshotStore;
  ownership: Ownership;
  secrets: SecretKeeper;
  logger: Logger;
  /** Rehydrations running at once; further ones (and their actions) wait their turn. */
  rehydrateConcurrency: number;
  /** The deps of a conversation's session; `known` is its index entry. */
  sessionDeps(conversationId: string, known?: ConversationEntry): SessionDeps;
}

/**
 * The sessions this node holds in memory, and the two ways in and out:
 * rehydration (a bounded number at a time, one per conversation) and
 * passivation (one per conversation; an action that meets it waits and goes
 * to the session that comes back). Claims, rehydrations and releases of one
 * conversation run one at a time (`exclusive`), so a release never deletes
 * the owner record a rehydration on this node has just read as its own.
 */
export class LiveSessions {
  readonly #deps: LiveSessionsDeps;
  readonly #live = new Map<string, Session>();
  readonly #rehydrating = new Map<string, Promise<Session>>();
  readonly #leaving = new Map<string, Promise<void>>();
  readonly #claims = new Map<string, Promise<unknown>>();
  readonly #limit: LimitFunction;

  constructor(deps: LiveSessionsDeps) {
    this.#deps = deps;
    this.#limit = pLimit(deps.rehydrateConcurrency);
  }

  /** The conversation's session when it runs here (not released). */
  get(conversationId: string): Session | undefined {
    const session = this.#live.get(conversationId);
    return session && !session.released ? session : undefined;
  }

  /** Whether the conversation has a session here, being rehydrated, or leaving. */
  has(conversationId: string): boolean {
    return this.#live.has(conversationId) || this.#rehydrating.has(conversationId);
  }

  /** Whether a session here is leaving memory. */
  leaving(conversationId: string): boolean {
    return this.#leaving.has(conversationId);
  }

  values(): IterableIterator<Session> {
    return this.#live.values();
  }

  get size(): number {
    return this.#live.size;
  }

  /** A session created or forked here. */
  adopt(session: Session): void {
    this.#live.set(session.conversationId, session);
  }

  /** A released session leaves the map (unless a passivation removes it when done). */
  released(session: Session): void {
    const id = session.conversationId;
    if (this.#live.get(id) === session && !this.#leaving.has(id)) this.#live.delete(id);
  }

  /** Forgets a conversation's session without releasing it (the caller does). */
  remove(conversationId: string): Session | undefined {
    const session = this.#live.get(conversationId);
    this.#live.delete(conversationId);
    return session;
  }

  /** The session of `entry`, rehydrated here from its snapshot and log when it is not live. */
  rehydrate(entry: ConversationEntry): Promise<Session> {
    const id = entry.conversation_id;
    const live = this.get(id);
    if (live) return Promise.resolve(live);
    let rehydrating = this.#rehydrating.get(id);
    if (!rehydrating) {
      const leaving = this.#leaving.get(id) ?? Promise.resolve();
      rehydrating = leaving
        .then(() => this.#limit(() => this.#rehydrateNow(entry)))
        .finally(() => this.#rehydrating.delete(id));
      this.#rehydrating.set(id, rehydrating);
    }
    return rehydrating;
  }

  /** Waits for a rehydration or a passivation under way (one session writes the end of a conversation). */
  async settled(conversationId: string): Promise<void> {
    await this.#rehydrating.get(conversationId)?.catch(() => undefined);
    await this.#leaving.get(conversationId);
  }

  /** Sends a session out of memory (snapshot, effects and runtime stopped, workspace kept); its ownership goes with it. */
  passivate(conversationId: string, reason: PassivationReason): Promise<void> {
    const session = this.get(conversationId);
    if (!session) return this.#leaving.get(conversationId) ?? Promise.resolve();
    let leaving = this.#leaving.get(conversationId);
    if (!leaving) {
      leaving = session
        .passivate(reason)
        .catch((err) =>
          this.#deps.logger.warn('passivation failed', { conversation_id: conversationId, ...errorFields(err) }),
        )
        .finally(async () => {
          this.#leaving.delete(conversationId);
          if (this.#live.get(conversationId) === session) this.#live.delete(conversationId);
          // Out of memory: the node that needs it next claims it.
          await this.exclusive(conversationId, async () => {
            if (!this.#live.has(conversationId) && !this.#rehydrating.has(conversationId))
              await this.#deps.ownership.release(conversationId);
          });
        });
      this.#leaving.set(conversationId, leaving);
      this.#deps.logger.info('session passivated', { conversation_id: conversationId, reason });
    }
    return leaving;
  }

  /** Passivates every session (a shutdown), then releases what is left. */
  async passivateAll(reason: PassivationReason): Promise<void> {
    await Promise.allSettled([...this.#live.keys()].map((id) => this.passivate(id, reason)));
    const rest = [...this.#live.values()];
    this.#live.clear();
    await Promise.allSettled(rest.map((s) => s.release('server shutting down')));
  }

  /** The lease lapsed: every session is released at once and writes nothing (another node may own it now). */
  dropAll(reason: string): void {
    const sessions = [...this.#live.values()];
    this.#live.clear();
    for (const session of sessions) {
      this.#deps.ownership.forget(session.conversationId);
      void session.release(reason);
    }
    if (sessions.length > 0) this.#deps.logger.warn('sessions released', { count: sessions.length, reason });
  }

  /** Waits until no live session has a command out or an agent step (a reply streaming) under way, for at most `ms`. */
  async workDone(ms: number): Promise<void> {
    const until = performance.now() + ms;
    const working = (snapshot: Session['snapshot']) =>
      snapshot !== undefined &&
      (snapshot.context.pendingCommand !== null || snapshot.matches({ active: { running: 'thinking' } }));
    const running = () => [...this.#live.values()].some((s) => !s.released && working(s.snapshot));
    while (running() && performance.now() < until) await new Promise((resolve) => setTimeout(resolve, 25));
  }

  /** Runs `work` after this conversation's claims, rehydrations and releases on this node. */
  exclusive<T>(conversationId: string, work: () => Promise<T>): Promise<T> {
    const step = (this.#claims.get(conversationId) ?? Promise.resolve()).then(work);
    const tail = step.catch(() => undefined);
    this.#claims.set(conversationId, tail);
    void tail.then(() => {
      if (this.#claims.get(conversationId) === tail) this.#claims.delete(conversationId);
    });
    return step;
  }

  async #rehydrateNow(entry: ConversationEntry): Promise<Session> {
    const id = entry.conversation_id;
    const { log, snapshots, secrets, logger } = this.#deps;
    const stored = await readStoredState(log, snapshots, id);
    // A conversation that ended (deleted, its purge not done) does not come back.
    if (!stored || stored.state.snapshot.status !== 'active') throw new ConversationNotFoundError(id);
    await secrets.load(id);
    const deps = this.#deps.sessionDeps(id, entry);
    const { from, folded, state } = stored;
    const first = { type: 'rehydrate' as const, from, folded, recordedState: state.recordedState };
    const session = await Session.open(id, deps, state, first);
    this.#live.set(id, session);
    logger.info('session rehydrated', {
      conversation_id: id,
      from: stored.from,
      folded: stored.folded,
      state: session.state,
    });
    return session;
  }
}
