import { createActor } from 'xstate';
import type { SessionInput } from './sessionContext.ts';
import type { SessionEvent } from './sessionEvents.ts';
import { sessionMachine, type SessionSnapshot } from './sessionMachine.ts';

type Scope = Parameters<typeof sessionMachine.transition>[2];

let inert: Scope | undefined;

/**
 * An actor scope that runs nothing, made once. xstate's `transition()` builds
 * a throw-away actor and actor system for every call (about 45 µs each); the
 * session machine's actions only assign context and it has no children, so
 * one scope serves every pure step (about 10 µs).
 */
function scope(): Scope {
  if (inert) return inert;
  const self = createActor(sessionMachine, { input: undefined });
  inert = {
    self,
    id: '',
    sessionId: '',
    system: self.system,
    logger: () => {},
    defer: () => {},
    emit: () => {},
    stopChild: () => {},
    actionExecutor: () => {},
  };
  return inert;
}

/** A new conversation's first snapshot. Pure. */
export function initialSnapshot(input: SessionInput): SessionSnapshot {
  return sessionMachine.getInitialSnapshot(scope(), input);
}

/** The snapshot after one event (the same one when the machine refuses it). Pure. */
export function nextSnapshot(snapshot: SessionSnapshot, event: SessionEvent): SessionSnapshot {
  return sessionMachine.transition(snapshot, event, scope());
}
