import type { StoredEvent } from '../protocol/index.ts';
import { SESSION_MACHINE_VERSION } from './sessionContext.ts';

/**
 * How a stored event written under machine version N reads under N + 1. A
 * version bump that gives an old event another meaning ships its entry here,
 * and a fixture log of the old version that must fold to the same agent states
 * (test/machines/machineVersion.unit.test.ts), so old logs always fold.
 */
export interface Upcaster {
  /** What the bump to `from + 1` reinterprets, in words (for docs and reviews). */
  reinterprets: string;
  upcast(event: StoredEvent): StoredEvent;
}

export const UPCASTERS: Readonly<Record<number, Upcaster>> = {
  3: {
    reinterprets:
      'events, nothing: version 4 adds context derived from events version 3 logs already hold (runtime lost, ' +
      'running since, interrupted commands). One rule changed: `executing` now finishes only with its own ' +
      "command's output; a version 3 log keeps version 3's rule (any output finishes it) through the guard " +
      '`writtenUnderVersion3` on `context.machineVersion`, until its `machine_upgraded`. A version 3 ' +
      '`runtime_status reconnecting` still reads as a runtime starting.',
    upcast: (event) => event,
  },
  4: {
    reinterprets:
      'nothing: version 5 adds the stored fact `conversation_forked` (kept in `context.forkedFrom`), which ' +
      'version 4 logs do not hold, and the fork input of the decider.',
    upcast: (event) => event,
  },
  5: {
    reinterprets:
      'nothing: version 6 reads the rate-limit retry bound from `conversation_created.max_rate_limit_retries`, ' +
      'which no version 5 log holds, so it is 5 there, the bound version 5 kept in code. machines/ takes only ' +
      'types from protocol/ (no zod), and the fold, the decider and the first state step the machine one way ' +
      '(machines/step.ts, public xstate API only); each step is the one version 5 took.',
    upcast: (event) => event,
  },
  6: {
    reinterprets:
      'nothing: version 7 adds the stored fact `agent_attempt` (an agent step tried again) and the attempt bound ' +
      '`conversation_created.max_attempts`, neither of which a version 6 log holds. Without a recorded bound a ' +
      'log folds as version 6 did: a rate-limited step comes back as a new step (one more iteration), and ' +
      'answers naming no attempt answer any. Stored agent answers may now carry `item_id`, `attempt`, ' +
      '`deltas` and `thought`, which change no transition.',
    upcast: (event) => event,
  },
  7: {
    reinterprets:
      'one rule, through a guard: under version 8 a pause asked while the agent works waits for the step to ' +
      "answer or the command to finish (`context.pausing`); a version 7 log keeps version 7's rule (paused at " +
      'once, the late answer refused, the late output recorded) through the guard `writtenBeforeVersion8` on ' +
      '`context.machineVersion`, until its `machine_upgraded`. Version 8 adds the user event `interrupt`, the ' +
      'agent message field `interrupted`, the output field `cancelled`, `conversation_created.double_texting` ' +
      '(absent: enqueue) and takes `agent_usage` in any active state; no version 7 log holds any of them.',
    upcast: (event) => event,
  },
  8: {
    reinterprets:
      'nothing: version 9 adds `conversation_created.repository` and the stored facts `repository_cloned`, ' +
      '`repository_clone_failed` (the agent in error, the runtime stopped, not lost) and `instructions_loaded`, ' +
      'kept in `context.repository`; no version 8 log holds any of them, so its `context.repository` is null and ' +
      'its runtime starts as before. The decider proposes from machines/proposals.ts (split from decide.ts).',
    upcast: (event) => event,
  },
  9: {
    reinterprets:
      "an agent `command`'s rating: version 10 stores with each agent call whether it waits in confirmation mode " +
      "(`needs_confirmation`, from the model's `security_risk` and the rules' `risk`), and the fold reads only that; " +
      'a version 9 command has only the rules\' `risk`, so it reads `needs_confirmation: risk == "high"`, the rule ' +
      'version 9 applied. Version 10 adds the stored facts `tool_call`, `tool_result` and `tools_listed`, `call_id` on ' +
      'calls and their results, several calls per reply (`context.queuedCalls`) and results for calls that a ' +
      'rejection, a stop, a passivation, a lost runtime or a failed clone leaves unrun; no version 9 log holds any of them.',
    upcast: (event) =>
      event.type === 'command' && event.source === 'agent' && event.data.needs_confirmation === undefined
        ? { ...event, data: { ...event.data, needs_confirmation: event.data.risk === 'high' } }
        : event,
  },
};

/**
 * The upcasting of one log written under `version`: identity for the current
 * version; otherwise every event goes through each step up to the current one.
 * Throws for a version with no path (a bump that forgot its entry).
 */
export function upcasterFor(
  version: number,
  table: Readonly<Record<number, Upcaster>> = UPCASTERS,
  current = SESSION_MACHINE_VERSION,
): ((event: StoredEvent) => StoredEvent) | null {
  if (version === current) return null;
  if (version > current) throw new Error(`a log of machine version ${version} is newer than this machine (${current})`);
  const steps: Upcaster[] = [];
  for (let v = version; v < current; v++) {
    const step = table[v];
    if (!step) throw new Error(`no upcaster from machine version ${v} to ${v + 1}`);
    steps.push(step);
  }
  return (event) => steps.reduce((e, step) => step.upcast(e), event);
}
