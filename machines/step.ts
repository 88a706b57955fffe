import { createActor, type Actor } from 'xstate';
import type { SessionInput } from './sessionContext.ts';
import type { SessionEvent } from './sessionEvents.ts';
import { sessionMachine, type SessionMachine, type SessionSnapshot } from './sessionMachine.ts';

/*
 * The one way the machine is stepped (the fold, the decider, a new
 * conversation's first state), through xstate's public API only: an actor
 * made with `createActor` from an input or a snapshot, `send`, `getSnapshot`.
 * The machine's actions only assign context and it invokes no children, so an
 * actor runs nothing, and one restored from any snapshot (even one xstate's
 * pure `transition()` made: DESIGN.md, "Pitfalls") loses nothing.
 *
 * Making an actor costs more than a step, so the actor that produced a
 * snapshot is kept with it, and the next step from exactly that snapshot
 * reuses it: a fold, or a session's decisions one after the other, cost one
 * actor in all. A step from any other snapshot (an older one, one restored
 * from a record) starts a new actor there. Callers see pure functions: the
 * same snapshot and event give an equal snapshot, whatever was stepped before.
 * Guarded by test/machines/step.unit.test.ts and fold.unit.test.ts (each step
 * as xstate's `transition()` takes it) and test/properties/ (a fold equals the
 * live session).
 */

type SessionActor = Actor<SessionMachine>;

/**
 * Each snapshot a step returned, and the actor that stands at it. Weak: an
 * actor lives as long as its snapshot, so a session that keeps its snapshot
 * keeps one actor too (about 4 KiB of heap), and one that drops it frees both.
 */
const standingAt = new WeakMap<SessionSnapshot, SessionActor>();

/** A new conversation's first snapshot, from its input (`inputFrom` its creation record). */
export function initialSnapshot(input: SessionInput): SessionSnapshot {
  return settle(started(input));
}

/** The snapshot after one event (the same state when the machine takes none). Throws what the machine throws. */
export function nextSnapshot(snapshot: SessionSnapshot, event: SessionEvent): SessionSnapshot {
  const actor = actorAt(snapshot);
  actor.send(event);
  return settle(actor);
}

function actorAt(snapshot: SessionSnapshot): SessionActor {
  const actor = standingAt.get(snapshot);
  // Taken off the snapshot it leaves: a later step from that snapshot starts its own actor.
  standingAt.delete(snapshot);
  if (actor?.getSnapshot() === snapshot) return actor;
  // From a snapshot the input is not read: the context comes with it.
  return started(snapshot.context, snapshot);
}

function started(input: SessionInput, snapshot?: SessionSnapshot): SessionActor {
  const actor = createActor(sessionMachine, { input, ...(snapshot && { snapshot }) });
  // An error inside the machine stops the actor and shows in its snapshot (`settle` throws it);
  // an observer with an error handler keeps xstate from reporting it as unhandled as well.
  actor.subscribe({ error: () => {} });
  return actor.start();
}

function settle(actor: SessionActor): SessionSnapshot {
  const snapshot = actor.getSnapshot();
  if (snapshot.status === 'error') throw snapshot.error;
  standingAt.set(snapshot, actor);
  return snapshot;
}
