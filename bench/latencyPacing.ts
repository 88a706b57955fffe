// Open-loop pacing for the latency runs, in the client process: each
// conversation's sender sends on a fixed schedule whatever comes back (so a
// slow server cannot slow the senders down and hide its own delay), and each
// message's latency runs from the moment it was due to the moment the last
// client of its conversation has it. One clock: this process sends and receives.
import { performance } from 'node:perf_hooks';

/** A client of a paced run, Tether's or the Socket.IO baseline's. */
export interface PacedMember {
  /** Sends its conversation's k-th message now (called on the sender only). */
  sendMessage(k: number): void;
  /** Set by the driver: called with k when the conversation's k-th message reaches this client. */
  onArrival: ((k: number) => void) | null;
  /** Rejects when the client fails (an error frame, an early close). */
  readonly failed: Promise<never>;
}

export interface PacedGroup {
  sender: PacedMember;
  /** Every client of the conversation, the sender included. */
  members: readonly PacedMember[];
}

export interface PacedResult {
  /** First message due to the last one delivered everywhere. */
  ms: number;
  /** Per message (k × conversations + c), ms from due to the last client of its conversation having it. */
  latencies: Float64Array;
  /**
   * Per client position in a group (0: the sender), per message as above, ms
   * from due to that client having it; NaN where a group has no such client.
   */
  memberLatencies: Float64Array[];
  /** Per message, ms from due to actually sent: how closely this process kept to the schedule. */
  sendLags: Float64Array;
}

/**
 * Sends `messages` per group at `perSecond` messages a second in all, spread
 * evenly: message k of group c is due at (k × groups + c) / perSecond. Sends
 * whatever is due, then sleeps until the next one is (timers: ~1 ms steps).
 */
export function pacedRun(groups: readonly PacedGroup[], messages: number, perSecond: number): Promise<PacedResult> {
  const total = groups.length * messages;
  const latencies = new Float64Array(total);
  const widest = Math.max(0, ...groups.map((g) => g.members.length));
  const memberLatencies = Array.from({ length: widest }, () => new Float64Array(total).fill(NaN));
  const sendLags = new Float64Array(total);
  const arrivals = new Uint16Array(total);
  const t0 = performance.now() + 5;
  const due = (g: number) => t0 + (g * 1000) / perSecond;
  let delivered = 0;
  let next = 0;
  let timer: NodeJS.Timeout | undefined;
  const finished = new Promise<number>((resolve, reject) => {
    groups.forEach((group, c) => {
      group.members.forEach((member, position) => {
        member.onArrival = (k) => {
          const g = k * groups.length + c;
          if (k >= messages || g >= next)
            return reject(new Error(`message ${k} of conversation ${c} arrived but was never sent`));
          const ms = performance.now() - due(g);
          memberLatencies[position]![g] = ms;
          if (++arrivals[g]! < group.members.length) return;
          latencies[g] = ms;
          if (++delivered === total) resolve(performance.now() - t0);
        };
      });
    });
    const tick = () => {
      const now = performance.now();
      while (next < total && due(next) <= now) {
        const g = next++;
        groups[g % groups.length]!.sender.sendMessage(Math.floor(g / groups.length));
        sendLags[g] = performance.now() - due(g);
      }
      if (next < total) timer = setTimeout(tick, Math.max(0, due(next) - performance.now()));
    };
    timer = setTimeout(tick, Math.max(0, t0 - performance.now()));
  });
  const failed = Promise.race(groups.flatMap((g) => g.members.map((m) => m.failed)));
  return Promise.race([finished, failed])
    .then((ms) => ({ ms, latencies, memberLatencies, sendLags }))
    .finally(() => {
      clearTimeout(timer);
      for (const group of groups) for (const member of group.members) member.onArrival = null;
    });
}
