import { isComingUp, type Deadline } from './sessionContext.ts';
import type { SessionSnapshot } from './sessionMachine.ts';

/**
 * What a state asks the host to do. Each names the stored event that asked
 * for it (`cause`); the host runs each (type, cause) once, and its result
 * comes back to the decider as an input.
 */
export type Effect =
  /** Bring up a runtime for `cause` (0: the creation record; else a `reconnect_runtime`), replacing an older one. */
  | { type: 'start_runtime'; cause: number }
  /** Ask the agent for its next action, as attempt `attempt` of step `cause` (its item); the answer carries both. */
  | { type: 'ask_agent'; cause: number; attempt: number }
  /** Run command `cause` in the runtime. */
  | { type: 'run_command'; cause: number; command: string }
  /** The runtime died and no reconnect replaced it: command `cause` fails at once, with `why`. */
  | { type: 'fail_command'; cause: number; command: string; why: string }
  /** Command `cause` was out when the process died: reported interrupted, never run again. */
  | { type: 'interrupt_command'; cause: number; command: string }
  /** Wake up at the deadline, then tell the decider it passed. */
  | { type: 'wake_at'; deadline: Deadline };

/**
 * The effects a snapshot asks for, read from its state and context alone, so
 * a session folded from the log after a restart asks for exactly what the live
 * one did (a command then reads as interrupted: rule 6 of the design).
 */
export function effectsOf(snapshot: SessionSnapshot): Effect[] {
  if (snapshot.status !== 'active' || snapshot.matches('passivated')) return [];
  const { context } = snapshot;
  const effects: Effect[] = [];
  if (snapshot.matches('starting') || isComingUp(context.runtime)) {
    effects.push({ type: 'start_runtime', cause: context.runtimeCause });
  }
  if (context.stepCause !== null && snapshot.matches({ active: { running: 'thinking' } })) {
    effects.push({ type: 'ask_agent', cause: context.stepCause, attempt: context.attempt });
  }
  const pending = context.pendingCommand;
  if (pending?.interrupted) {
    effects.push({ type: 'interrupt_command', cause: pending.eventId, command: pending.command });
  } else if (pending && snapshot.matches({ active: { running: 'executing' } })) {
    const { eventId: cause, command } = pending;
    // Sent to a lost runtime (or one whose repository could not be cloned): it fails, also once a
    // reconnect has come before its report.
    const lost = context.runtimeLost ?? pending.lost ?? context.repository?.failure ?? null;
    effects.push(
      lost === null ? { type: 'run_command', cause, command } : { type: 'fail_command', cause, command, why: lost },
    );
  }
  if (context.deadline) effects.push({ type: 'wake_at', deadline: context.deadline });
  return effects;
}

/** One name per effect and cause (and attempt): the host starts each once. */
export function effectKey(effect: Effect): string {
  if (effect.type === 'wake_at') return `wake_at:${effect.deadline.name}:${effect.deadline.at}`;
  return effect.type === 'ask_agent' ? `ask_agent:${effect.cause}:${effect.attempt}` : `${effect.type}:${effect.cause}`;
}
