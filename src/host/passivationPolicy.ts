import type { SessionSnapshot } from '../../machines/index.ts';
import type { PassivationReason, StatusFrame } from '../../protocol/index.ts';
import type { Session } from '../conversation/session.ts';

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

export const TOO_MANY_CONVERSATIONS: StatusFrame = {
  type: 'status',
  level: 'error',
  id: 'AGENT_ERROR$TOO_MANY_CONVERSATIONS',
  // Nothing was paused: the conversation comes back in the state it left, and a running one goes on by itself.
  message:
    'Too many conversations are running for this user: this one left memory. Its next action brings it back where it was, and its task goes on.',
};

/**
 * When sessions leave memory. Each rule is checked on a sweep (idle rules and
 * the live cap) or when a session starts running (the per-user cap). It keeps
 * nothing of its own: busy is a machine tag, activity the time of the last
 * stored event, and running-since a stored event's time in the machine's context.
 */
export class PassivationPolicy {
  readonly #host: PassivationHost;
  readonly #limits: PassivationLimits;
  readonly #now: () => number;
  #timer: NodeJS.Timeout | null = null;

  constructor(host: PassivationHost, limits: PassivationLimits, now: () => number) {
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
      if (session.released) continue;
      live += 1;
      if (session.busy) continue;
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

  /**
   * Called after every decision: a session that just started running (its
   * running-since changed, also when it comes back into memory running) is
   * counted against its user's cap, and the user's oldest running ones leave.
   */
  applied(session: Session, before: SessionSnapshot | undefined): void {
    const since = session.runningSince;
    if (since === null || since === (before?.context.runningSince ?? null)) return;
    const user = session.user;
    const others = [...this.#host.live()].filter(
      (s) => s !== session && !s.released && s.user === user && (s.state === 'running' || s.state === 'loading'),
    );
    let excess = others.length + 1 - this.#limits.maxRunningPerUser;
    const oldestFirst = others
      .filter((s) => s.state === 'running')
      .sort((a, b) => (a.runningSince ?? 0) - (b.runningSince ?? 0));
    for (const victim of oldestFirst) {
      if (excess <= 0) break;
      excess -= 1;
      this.#host.notify(victim.conversationId, TOO_MANY_CONVERSATIONS);
      this.#passivate(victim, 'too_many_running');
    }
  }

  #passivate(session: Session, reason: PassivationReason): void {
    void this.#host.passivate(session, reason);
  }
}
