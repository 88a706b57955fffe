import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createActor, initialTransition, transition } from 'xstate';
import { sessionMachine } from '../../machines/index.ts';
import { chooseAccepted, liveScenario, machineRun } from './arbitraries.ts';
import { expectConsistent, Harness } from './harness.ts';
import { corruptedCopies, expectSame, logViolations, persisted } from './logChecks.ts';
import { seededRuns } from './seeds.ts';

const EFFECTS = new Set(['startRuntime', 'askAgent', 'runCommand']);

/** The effects a pure transition asks for, in order. */
function effectsOf(actions: ReadonlyArray<{ type: string }>): string[] {
  return actions.map((a) => a.type).filter((t) => EFFECTS.has(t));
}

describe('the session machine as a live actor and as a fold', () => {
  it.each(seededRuns('machine', 50))(
    'reaches the same persisted snapshot and asks for the same effects, step by step, for any accepted event sequence (seed $params.seed)',
    ({ params }) => {
      fc.assert(
        fc.property(machineRun, ([input, steps]) => {
          const requested: string[] = [];
          const record = (name: string) => () => void requested.push(name);
          const live = createActor(
            sessionMachine.provide({
              actions: {
                startRuntime: record('startRuntime'),
                askAgent: record('askAgent'),
                runCommand: record('runCommand'),
              },
            }),
            { input },
          ).start();
          let [folded, actions] = initialTransition(sessionMachine, input);
          expect(requested).toEqual(effectsOf(actions));
          expectSame(live.getPersistedSnapshot(), persisted(folded));

          let eventId = 1;
          for (const step of steps) {
            if (folded.status !== 'active') break;
            const { accepted: event, refused } = chooseAccepted(folded, eventId, step);
            if (step.alsoRefused !== null && refused.length > 0) {
              // A refused event changes neither the actor nor the fold.
              const wrong = refused[step.alsoRefused % refused.length]!;
              const before = persisted(folded);
              requested.length = 0;
              live.send(wrong);
              const [unchanged, none] = transition(sessionMachine, folded, wrong);
              expectSame(persisted(unchanged), before);
              expect(effectsOf(none)).toEqual([]);
              expectSame(live.getPersistedSnapshot(), before);
              expect(requested).toEqual([]);
            }
            if (event === undefined) continue;
            requested.length = 0;
            live.send(event);
            [folded, actions] = transition(sessionMachine, folded, event);
            expectSame(live.getPersistedSnapshot(), persisted(folded), `after ${JSON.stringify(event)}`);
            expect(requested, `effects of ${event.type}`).toEqual(effectsOf(actions));
            eventId += 1;
          }
          live.stop();
        }),
        params,
      );
    },
  );
});

describe('a live session on the in-memory host', () => {
  it.each(seededRuns('live', 50))(
    'always equals the fold of its stored log, whose ids are dense, whose state facts match the fold and which holds nothing for refused actions (and a broken copy of that log is caught) (seed $params.seed)',
    async ({ params }) => {
      await fc.assert(
        fc.asyncProperty(liveScenario, async ({ harness, conversation, ops, corruptAt }) => {
          const h = new Harness(harness);
          try {
            await h.create(conversation);
            await expectConsistent(h);
            for (const op of ops) {
              if (op.kind === 'act') await h.act(op.action);
              else if (op.kind === 'act_pair') await h.act(...op.actions);
              else if (op.kind === 'release') await h.release(op.what, op.outcome);
              else if (op.kind === 'settle') await h.settle();
              else if (op.kind === 'kill_runtime') await h.killRuntime();
              await expectConsistent(h);
            }
            await h.settle();
            await expectConsistent(h, true);
            // The checker bites: every broken copy of this log is reported.
            const copies = corruptedCopies(await h.events(), corruptAt);
            expect(copies.length).toBeGreaterThanOrEqual(4);
            for (const { how, log } of copies) expect(logViolations(log), how).not.toEqual([]);
          } finally {
            await h.dispose();
          }
        }),
        params,
      );
    },
  );
});
