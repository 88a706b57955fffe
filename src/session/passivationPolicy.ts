import type { AgentState, PassivationReason, StatusFrame } from '../protocol/index.ts';
import type { Session } from './session.ts';

export interface PassivationLimits {
  /** No connection and not busy for this long: leave memory. */
  closeDelayMs: number;
  /** Not busy for this long, connections or not: leave memory (hibernation). */
  idleMs: number;
  /** Live sessions per process; the least recently used idle ones leave first. */
  maxLive: number;
  /** Running conversations per user; starting one more passivates that user's oldest. */
  maxRunningPerUser: number;
}

export interface PassivationHost {
  live(): Iterable<Session>;
  connections(conversationId: string): number;
  passivate(session: Session, reason: PassivationReason): Promise<void>;
  notify(conversationId: string, frame: StatusFrame): void;
}

/** States in which a session works by itself; they are never passivated for idleness. */
const BUSY = new Set<AgentState>(['loading', 'running', 'rate_limited']);

export const TOO_MANY_CONVERSATIONS: StatusFrame = {
  type: 'status',
  level: 'error',
  id: 'AGENT_ERROR$TOO_MANY_CONVERSATIONS',
  // Nothing was paused: the conversation comes back in the state it left, and a running one goes on by itself.
  message:
    'Too many conversations are running for this user: this one left memory. Its next action or connection brings it back where it was, and its task goes on.',
};

/**
 * When sessions leave memory. Each rule is checked on a sweep (idle rules and
 * the live cap) or when a session starts running (the per-user cap).
 */
export class PassivationPolicy {
  readonly #host: PassivationHost;
  readonly #limits: PassivationLimits;
  readonly #now: () => number;
  readonly #runningSince = new Map<string, number>();
  #timer: NodeJS.Timeout | null = null;

  constructor(host: PassivationHost, limits: PassivationLimits, now: () => number = Date.now) {
    this.#host = host;
    this.#limits = limits;
    this.#now = now;
  }

  /** Sweeps at a quarter of the shortest idle delay (at most once a second). */
  start(): void {
    const every = Math.max(
      50,
      Math.min(1000, Math.floor(Math.min(this.#limits.closeDelayMs, this.#limits.idleMs) / 4)),
    );
    this.#timer = setInterval(() => this.sweep(), every);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** Applies the idle rules and the live cap once. */
  sweep(): void {
    const now = this.#now();
    const idle: Session[] = [];
    let live = 0;
    for (const session of this.#host.live()) {
      if (session.closed) continue;
      live += 1;
      if (BUSY.has(session.state)) continue;
      const quietFor = now - session.lastActivity;
      if (quietFor >= this.#limits.closeDelayMs && this.#host.connections(session.conversationId) === 0) {
        this.#passivate(session, 'close_delay');
        live -= 1;
      } else if (quietFor >= this.#limits.idleMs) {
        this.#passivate(session, 'idle');
        live -= 1;
      } else {
        idle.push(session);
      }
    }
    const excess = live - this.#limits.maxLive;
    if (excess <= 0) return;
    idle.sort((a, b) => a.lastActivity - b.lastActivity);
    for (const session of idle.slice(0, excess)) this.#passivate(session, 'capacity');
  }

  /** Called after every applied event: tracks running sessions and enforces the per-user cap. */
  applied(session: Session, before: AgentState): void {
    const state = session.state;
    if (state !== 'running') {
      if (before === 'running') this.#runningSince.delete(session.conversationId);
      return;
    }
    if (before === 'running') return;
    this.#runningSince.set(session.conversationId, this.#now());
    const owner = session.owner;
    const running = [...this.#host.live()].filter(
      (s) => !s.closed && s.owner === owner && (s.state === 'running' || s.state === 'loading'),
    );
    let excess = running.length - this.#limits.maxRunningPerUser;
    const oldestFirst = running
      .filter((s) => s !== session && s.state === 'running')
      .sort((a, b) => this.#since(a) - this.#since(b));
    for (const victim of oldestFirst) {
      if (excess <= 0) break;
      excess -= 1;
      this.#host.notify(victim.conversationId, TOO_MANY_CONVERSATIONS);
      this.#passivate(victim, 'too_many_running');
    }
  }

  forget(conversationId: string): void {
    this.#runningSince.delete(conversationId);
  }

  #since(session: Session): number {
    return this.#runningSince.get(session.conversationId) ?? 0;
  }

  #passivate(session: Session, reason: PassivationReason): void {
    this.#runningSince.delete(session.conversationId);
    void this.#host.passivate(session, reason);
  }
}
