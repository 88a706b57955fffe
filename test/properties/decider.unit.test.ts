import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decide,
  effectsOf,
  foldEvents,
  sessionMachine,
  type DecisionInput,
  type SessionSnapshot,
} from '../../machines/index.ts';
import { AgentState, PassivationReason, type StoredEvent } from '../../protocol/index.ts';
import { expectSame, logViolations, persisted } from './logChecks.ts';
import { seededRuns } from './seeds.ts';

const START = Date.UTC(2026, 0, 1);
const CONVERSATION = 'c1';

/** Raw choices for one input; `inputFor` turns them into an input that fits the current snapshot. */
const choice = fc.record({
  kind: fc.constantFrom(
    'user_message',
    'user_run',
    'user_state',
    'user_interrupt',
    'reconnect',
    'runtime_progress',
    'runtime_lost',
    'agent',
    'agent_used',
    'agent_failed',
    'command',
    'deadline',
    'passivate',
    'rehydrate',
  ),
  pick: fc.nat(),
  state: fc.constantFrom(...AgentState.options),
  stale: fc.integer({ min: 0, max: 5 }).map((n) => n === 0),
  reason: fc.constantFrom(...PassivationReason.options),
  /** Seconds since the last input. */
  wait: fc.constantFrom(0, 1, 5, 60),
});
type Choice = typeof choice extends fc.Arbitrary<infer T> ? T : never;

const conversationRun = fc.record({
  confirmationMode: fc.boolean(),
  maxIterations: fc.integer({ min: 1, max: 5 }),
  maxBudget: fc.option(fc.constantFrom(0.5, 1), { nil: undefined }),
  startTimeoutMs: fc.option(fc.constantFrom(2_000, 60_000), { nil: undefined }),
  doubleTexting: fc.constantFrom('enqueue' as const, 'interrupt' as const, 'reject' as const),
  steps: fc.array(choice, { maxLength: 60, size: 'max' }),
});

function inputFor(snapshot: SessionSnapshot, c: Choice, nextId: number): DecisionInput {
  const { context } = snapshot;
  const stepCause = c.stale || context.stepCause === null ? Math.max(0, nextId - 3) : context.stepCause;
  const pending = context.pendingCommand;
  const commandCause = c.stale || !pending ? Math.max(0, nextId - 2) : pending.eventId;
  const command = pending?.command ?? 'ls';
  switch (c.kind) {
    case 'user_message':
      return {
        type: 'user_action',
        action: { type: 'message', content: `hello ${c.pick % 3}` },
        ...(c.pick % 2 === 0 && { streamed: streamedOf(context) }),
      };
    case 'user_interrupt':
      return {
        type: 'user_action',
        action: { type: 'interrupt' },
        ...(c.pick % 2 === 0 && { streamed: streamedOf(context) }),
      };
    case 'user_run':
      return { type: 'user_action', action: { type: 'run', command: 'echo hi' } };
    case 'user_state':
      return {
        type: 'user_action',
        action: { type: 'change_agent_state', state: c.state },
        ...(c.pick % 2 === 0 && { streamed: streamedOf(context) }),
      };
    case 'reconnect':
      return { type: 'user_action', action: { type: 'reconnect_runtime' } };
    case 'runtime_progress': {
      const statuses = ['starting', 'connecting', 'setting_up', 'connected'] as const;
      return { type: 'runtime_progress', status: statuses[c.pick % statuses.length]! };
    }
    case 'runtime_lost':
      return { type: 'runtime_lost', message: 'the runtime exited (signal SIGKILL)' };
    case 'agent': {
      const answers = [
        { type: 'message', content: 'done' },
        { type: 'message', content: 'more', waitForResponse: false },
        { type: 'run', command: 'make', risk: 'low' },
        { type: 'run', command: 'rm -rf /', risk: 'high' },
        { type: 'finish', content: 'finished' },
      ] as const;
      return { type: 'agent_answered', cause: stepCause, answer: answers[c.pick % answers.length]! };
    }
    case 'agent_used':
      return { type: 'agent_used', usage: { prompt_tokens: 10, completion_tokens: 5, cost: 0.3 } };
    case 'agent_failed':
      return c.pick % 2 === 0
        ? { type: 'agent_failed', cause: stepCause, code: 'AGENT_FAILED', message: 'boom' }
        : {
            type: 'agent_failed',
            cause: stepCause,
            code: 'LLM_RATE_LIMITED',
            message: 'slow down',
            retryAt: new Date(START + nextId * 1_000).toISOString(),
          };
    case 'command': {
      const result = { exit_code: 0, output: 'ok\n', timed_out: false, truncated: false };
      if (c.pick % 3 === 0) return { type: 'command_finished', cause: commandCause, command, result };
      if (c.pick % 3 === 1) return { type: 'command_interrupted', cause: commandCause, command, why: 'restart' };
      return { type: 'command_unavailable', cause: commandCause, command, why: 'the runtime exited' };
    }
    case 'deadline':
      return { type: 'deadline', name: context.deadline?.name ?? (c.pick % 2 === 0 ? 'start' : 'retry') };
    case 'passivate':
      return { type: 'passivate', reason: c.reason };
    case 'rehydrate':
      return { type: 'rehydrate', from: 'log', folded: nextId };
  }
}

/** What the current step's attempt streamed, as the host would give it with an action that may cut the step. */
function streamedOf(context: SessionSnapshot['context']) {
  return { itemId: String(context.stepCause), attempt: context.attempt, text: 'partial', deltas: 2 };
}

/** What a restart finds: the log folded from its first event, and from a persisted snapshot (JSON and back). */
function restarted(log: readonly StoredEvent[], live: SessionSnapshot): SessionSnapshot[] {
  const fromLog = foldEvents(log).snapshot;
  const stored = JSON.parse(JSON.stringify(live.machine.getPersistedSnapshot(live))) as {
    value: SessionSnapshot['value'];
    context: SessionSnapshot['context'];
  };
  const fromSnapshot = sessionMachine.resolveState({ value: stored.value, context: stored.context });
  return [fromLog, fromSnapshot];
}

describe('the decider, live and after a restart', () => {
  it.each(seededRuns('decider', 60))(
    'takes the same decisions and asks for the same effects from a fold of the log (and from a stored snapshot) as the live session did, runtime loss and reconnect included; a restart reports a command that was out as interrupted, never runs it again (seed $params.seed)',
    ({ params, regression }) => {
      const seen = { accepted: 0, refused: 0, reconnects: 0, lost: 0, interrupts: 0, busy: 0 };
      fc.assert(
        fc.property(conversationRun, (run) => {
          let now = START;
          const stamp = (nextEventId: number) => ({ conversationId: CONVERSATION, nextEventId, now: new Date(now) });
          const created = decide(
            undefined,
            {
              type: 'create',
              conversationId: CONVERSATION,
              data: {
                user: 'u',
                confirmation_mode: run.confirmationMode,
                max_iterations: run.maxIterations,
                ...(run.maxBudget !== undefined && { max_budget: run.maxBudget }),
                secret_names: [],
                replay: false,
                ...(run.startTimeoutMs !== undefined && { start_timeout_ms: run.startTimeoutMs }),
                double_texting: run.doubleTexting,
              },
            },
            stamp(0),
          );
          if (!created.ok) throw new Error('a creation is never refused');
          const log: StoredEvent[] = [...created.events];
          let live = created.snapshot;
          for (const c of run.steps) {
            if (live.status !== 'active') break;
            now += c.wait * 1_000;
            const input = inputFor(live, c, log.length);
            for (const folded of restarted(log, live)) {
              // Nothing that changes what the session does next lives outside the log.
              expectSame(persisted(folded), persisted(live), 'a restart folds to the live state');
              expect(effectsOf(folded), 'effects after a restart').toEqual(effectsOf(live));
              expect(decide(folded, input, stamp(log.length)), `deciding ${JSON.stringify(input)}`).toEqual(
                decide(live, input, stamp(log.length)),
              );
              // Coming back after a crash: a command that was out is reported, not run again.
              const back = decide(folded, { type: 'rehydrate', from: 'log', folded: log.length }, stamp(log.length));
              const pending = live.context.pendingCommand;
              const crashedWithCommandOut =
                live.matches('active') &&
                !live.matches({ active: 'awaiting_user_confirmation' }) &&
                pending !== null &&
                pending.held !== true;
              if (back.ok && crashedWithCommandOut) {
                expect(effectsOf(back.snapshot).map((e) => e.type)).not.toContain('run_command');
                expect(effectsOf(back.snapshot).map((e) => e.type)).toContain('interrupt_command');
              }
              // A command a pause held never started: it is neither run nor reported, until a resume runs it.
              if (back.ok && pending?.held) {
                expect(effectsOf(back.snapshot).map((e) => e.type)).not.toContain('run_command');
                expect(effectsOf(back.snapshot).map((e) => e.type)).not.toContain('interrupt_command');
              }
            }
            const decision = decide(live, input, stamp(log.length));
            if (!decision.ok) {
              seen.refused += 1;
              if (decision.code === 'AGENT_BUSY') seen.busy += 1;
              continue;
            }
            seen.accepted += 1;
            if (decision.events.some((e) => e.type === 'interrupt')) seen.interrupts += 1;
            if (decision.events.some((e) => e.type === 'reconnect_runtime')) seen.reconnects += 1;
            if (decision.events.some((e) => e.type === 'runtime_status' && e.data.status === 'disconnected'))
              seen.lost += 1;
            log.push(...decision.events);
            live = decision.snapshot;
          }
          // The log the decider wrote: dense ids, every state change with its fact, nothing the fold refuses.
          expect(logViolations(log)).toEqual([]);
          expectSame(persisted(foldEvents(log).snapshot), persisted(live), 'the whole log folds to the live state');
        }),
        params,
      );
      // The runs reach what the property is about. Checked on the fixed regression runs: a fresh seed's
      // fewer runs may miss one (seed 1179856475 met no AGENT_BUSY in its 60).
      if (!regression) return;
      expect(seen.accepted).toBeGreaterThan(seen.refused / 4);
      expect(seen.reconnects).toBeGreaterThan(0);
      expect(seen.lost).toBeGreaterThan(0);
      expect(seen.interrupts).toBeGreaterThan(0);
      expect(seen.busy).toBeGreaterThan(0);
    },
  );
});
