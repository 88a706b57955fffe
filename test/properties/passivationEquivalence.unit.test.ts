import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { passivationScenario, raceScenario, type HostOp } from './arbitraries.ts';
import { expectConsistent, Harness, USER, type ConversationOptions, type HarnessOptions } from './harness.ts';
import { outcomeOf } from './logChecks.ts';
import { seededRuns } from './seeds.ts';

interface RunResult {
  outcome: ReturnType<typeof outcomeOf>;
  iterations: number;
  /** Times the session left memory, by how and where. */
  left: Record<string, number>;
}

/**
 * Runs the script on a fresh host. With `leave` false the passivation points
 * are skipped: the uninterrupted run. Every quiet point of either run is
 * checked (live = fold, log invariants, snapshot load = log load).
 */
async function run(
  harness: HarnessOptions,
  conversation: ConversationOptions,
  ops: readonly HostOp[],
  leave: boolean,
): Promise<RunResult> {
  const h = new Harness(harness);
  const left: Record<string, number> = {};
  try {
    await h.create(conversation);
    await expectConsistent(h);
    for (const op of ops) {
      if (op.kind === 'act') await h.act(op.action);
      else if (op.kind === 'act_pair') await h.act(...op.actions);
      else if (op.kind === 'release') await h.release(op.what, op.outcome);
      else if (op.kind === 'settle') await h.settle();
      else if (op.kind === 'passivate' && leave) {
        const done = await h.leaveMemoryIfComparable(op);
        if (done !== 'skipped') left[`${op.how} ${done}`] = (left[`${op.how} ${done}`] ?? 0) + 1;
      }
      await expectConsistent(h);
    }
    // The end of the script: the conversation is looked at (brought back if out of memory) and left to finish.
    await h.manager.session(h.id, USER);
    await h.settle();
    await expectConsistent(h, true);
    const { snapshot } = await h.manager.session(h.id, USER);
    return { outcome: outcomeOf(snapshot!, await h.events()), iterations: snapshot!.context.iterations, left };
  } finally {
    await h.dispose();
  }
}

/**
 * Fresh seed 5 found this (shrunk): a user command stopped, then a message;
 * the command's output came while the agent thought and was refused, and the
 * stale pending command made the passivated run differ. Fixed in the machine.
 */
const PASSIVATION_FOUND: PassivationScenario = {
  harness: { instantCommands: false, snapshotEvery: 1 },
  conversation: { initialMessage: null, confirmationMode: false, maxIterations: 10000 },
  ops: [
    {
      kind: 'act_pair',
      actions: [
        { type: 'run', command: 'echo run' },
        { type: 'change_agent_state', state: 'stopped' },
      ],
    },
    { kind: 'act', action: { type: 'message', content: 'hello' } },
    { kind: 'release', what: 'command', outcome: 'succeed' },
    { kind: 'release', what: 'agent', outcome: 'succeed' },
    { kind: 'passivate', how: 'idle', dropSnapshot: false, eager: false },
  ],
};
type PassivationScenario = typeof passivationScenario extends fc.Arbitrary<infer T> ? T : never;

/** The shrunk counterexample seed 20260104 once found (see the race test below). */
const RACE_FOUND: RaceScenario = {
  harness: { instantCommands: false, snapshotEvery: 1 },
  conversation: { initialMessage: null, confirmationMode: false, maxIterations: 10000 },
  ops: [],
  action: { type: 'message', content: 'hello' },
  ticks: 2,
};
type RaceScenario = typeof raceScenario extends fc.Arbitrary<infer T> ? T : never;

describe('passivation and rehydration', () => {
  /*
   * What must be equal, and why:
   * - the final agent state and state value, and every context field except
   *   the three below;
   * - the conversation: the stored events without the lifecycle facts
   *   (runtime_status, session_passivated, session_rehydrated,
   *   agent_state_changed), compared by source, type and data, with each
   *   command output's cause as a position in that conversation. Lifecycle
   *   facts say how the session was hosted (a rehydrated session stops its
   *   runtime and starts a new one on the next command), not what happened.
   * Not compared:
   * - ids and timestamps, which shift with the lifecycle facts (pendingCommand
   *   is compared by position instead of id);
   * - `runtime`: after rehydration the runtime is stopped until a command needs it;
   * - the cause of an agent answer and `stepCause` (only whether a step is
   *   pending): a step retried after a passivation is asked again by
   *   session_rehydrated (rule 6), so its request id belongs to the hosting,
   *   not to the conversation.
   * Points where an equal outcome is not owed are skipped (see
   * Harness.leaveMemoryIfComparable): a command cut by passivation is
   * reported "interrupted", by design.
   * Each exit may also delete the snapshot, so the session comes back from a
   * fold of the whole log; and at every quiet point of both runs, loading
   * from the snapshot equals folding the whole log.
   */
  it.each(seededRuns('passivation', 25))(
    'ends a script passivated, restarted or crashed at random points exactly as the uninterrupted run of the same script (seed $params.seed)',
    async ({ params, regression }) => {
      const left: Record<string, number> = {};
      await fc.assert(
        fc.asyncProperty(passivationScenario, async ({ harness, conversation, ops }) => {
          const straight = await run(harness, conversation, ops, false);
          const interrupted = await run(harness, conversation, ops, true);
          expect(interrupted.outcome).toEqual(straight.outcome);
          // A step cut by passivation or a crash is asked again, and counted once.
          expect(interrupted.iterations, 'iterations').toBe(straight.iterations);
          for (const [how, n] of Object.entries(interrupted.left)) left[how] = (left[how] ?? 0) + n;
        }),
        { ...params, examples: [[PASSIVATION_FOUND]] },
      );
      // The script must reach every kind of exit at both kinds of point, or the property says little.
      // Checked on the fixed regression runs: a fresh seed's fewer runs may reach one only a few times.
      if (!regression) return;
      for (const how of ['idle', 'restart', 'crash']) {
        for (const where of ['idle', 'mid_step'])
          expect(left[`${how} ${where}`] ?? 0, `${how} ${where}`).toBeGreaterThan(3);
      }
    },
  );

  /*
   * FAILED (fixed since): a bug in src/conversation (Session.passivate with NodeHost.act).
   * seed 20260104 (still a regression seed), shrunk counterexample (RACE_FOUND, run first every time):
   *   {"harness":{"instantCommands":false,"snapshotEvery":1},
   *    "conversation":{"initialMessage":null,"confirmationMode":false,"maxIterations":10000},
   *    "ops":[],"action":{"type":"message","content":"hello"},"ticks":2}
   * A fresh conversation waits for the user; `manager.passivate(id, 'idle')`
   * starts and, 2 microtasks later, `manager.act(id, user, message)` is
   * refused with IllegalTransitionError "cannot send a message while the
   * agent is awaiting_user_input", and nothing is stored. The submit queues in
   * the mailbox behind the passivation job; when it runs the actor is already
   * `passivated` (which takes no user event) while `close()` has not yet
   * marked the session closed, so #apply throws IllegalTransitionError rather
   * than SessionUnavailableError, the one error act() retries on the session that
   * comes back. Scratch sweep: 0-1 ticks land before the passivation, 2-12
   * are refused, 13+ reach the rehydrated session.
   */
  it.each(seededRuns('race', 50))(
    'applies an action that meets its session leaving memory as if it came just before or just after, never refusing it for the passivated state (seed $params.seed)',
    async ({ params }) => {
      await fc.assert(
        fc.asyncProperty(raceScenario, async ({ harness, conversation, ops, action, ticks }) => {
          const h = new Harness(harness);
          try {
            await h.create(conversation);
            for (const op of ops) {
              if (op.kind === 'act') await h.act(op.action);
              else if (op.kind === 'release') await h.release(op.what, op.outcome);
              else if (op.kind === 'settle') await h.settle();
            }
            await h.settle();
            await expectConsistent(h);
            await h.actWhileLeaving(action, ticks);
            await h.manager.session(h.id, USER);
            await h.settle();
            await expectConsistent(h, true);
          } finally {
            await h.dispose();
          }
        }),
        { ...params, examples: [[RACE_FOUND]] },
      );
    },
  );
});
