import { isComingUp, type Deadline, type PendingCommand } from './sessionContext.ts';
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
  /** Make tool call `cause` (a `tool_call`: a file tool or an MCP tool). */
  | { type: 'call_tool'; cause: number; callId: string; tool: string; arguments: Record<string, unknown> }
  /** The runtime died and no reconnect replaced it: command (or tool call) `cause` fails at once, with `why`. */
  | { type: 'fail_command'; cause: number; command: string; why: string; callId?: string; tool?: string }
  /** Command (or tool call) `cause` was out when the process died: reported interrupted, never run again. */
  | { type: 'interrupt_command'; cause: number; command: string; callId?: string; tool?: string }
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
    effects.push({ type: 'interrupt_command', cause: pending.eventId, command: pending.command, ...callOf(pending) });
  } else if (pending && snapshot.matches({ active: { running: 'executing' } })) {
    const { eventId: cause, command } = pending;
    // Sent to a lost runtime (or one whose repository could not be cloned): it fails, also once a
    // reconnect has come before its report.
    const lost = context.runtimeLost ?? pending.lost ?? context.repository?.failure ?? null;
    if (lost !== null) effects.push({ type: 'fail_command', cause, command, why: lost, ...callOf(pending) });
    else if (pending.tool)
      effects.push({
        type: 'call_tool',
        cause,
        callId: pending.callId ?? `call_${cause}`,
        tool: pending.tool.name,
        arguments: pending.tool.arguments,
      });
    else effects.push({ type: 'run_command', cause, command });
  }
  if (context.deadline) effects.push({ type: 'wake_at', deadline: context.deadline });
  return effects;
}

/** A tool call's id and tool, for the result of one that fails or was interrupted (none for a shell command). */
function callOf(pending: PendingCommand): { callId?: string; tool?: string } {
  if (!pending.tool) return pending.callId === undefined ? {} : { callId: pending.callId };
  return { callId: pending.callId ?? `call_${pending.eventId}`, tool: pending.tool.name };
}

/** One name per effect and cause (and attempt): the host starts each once. */
export function effectKey(effect: Effect): string {
  if (effect.type === 'wake_at') return `wake_at:${effect.deadline.name}:${effect.deadline.at}`;
  return effect.type === 'ask_agent' ? `ask_agent:${effect.cause}:${effect.attempt}` : `${effect.type}:${effect.cause}`;
}
