import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createActor, initialTransition, transition } from 'xstate';
import { effectsOf, sessionMachine } from '../../machines/index.ts';
import { chooseAccepted, liveScenario, machineRun } from './arbitraries.ts';
import { expectConsistent, Harness } from './harness.ts';
import { corruptedCopies, expectSame, logViolations, persisted } from './logChecks.ts';
import { seededRuns } from './seeds.ts';

describe('the session machine as a live actor and as a fold', () => {
  it.each(seededRuns('machine', 50))(
    'reaches the same persisted snapshot and asks for the same effects, step by step, for any accepted event sequence (seed $params.seed)',
    ({ params }) => {
      fc.assert(
        fc.property(machineRun, ([input, steps]) => {
          const live = createActor(sessionMachine, { input }).start();
          let [folded, actions] = initialTransition(sessionMachine, input);
          // The machine runs nothing: its actions only assign context; effects are read from the state.
          expect(actions.filter((a) => !a.type.startsWith('xstate.'))).toEqual([]);
          expectSame(live.getPersistedSnapshot(), persisted(folded));
          expect(effectsOf(live.getSnapshot())).toEqual(effectsOf(folded));

          let eventId = 1;
          for (const step of steps) {
            if (folded.status !== 'active') break;
            const { accepted: event, refused } = chooseAccepted(folded, eventId, step);
            if (step.alsoRefused !== null && refused.length > 0) {
              // A refused event changes neither the actor nor the fold, nor what they ask for.
              const wrong = refused[step.alsoRefused % refused.length]!;
              const before = persisted(folded);
              const asked = effectsOf(folded);
              live.send(wrong);
              const [unchanged] = transition(sessionMachine, folded, wrong);
              expectSame(persisted(unchanged), before);
              expectSame(live.getPersistedSnapshot(), before);
              expect(effectsOf(live.getSnapshot())).toEqual(asked);
            }
            if (event === undefined) continue;
            live.send(event);
            [folded, actions] = transition(sessionMachine, folded, event);
            expect(
              actions.filter((a) => !a.type.startsWith('xstate.')),
              'the machine runs nothing',
            ).toEqual([]);
            expectSame(live.getPersistedSnapshot(), persisted(folded), `after ${JSON.stringify(event)}`);
            expect(effectsOf(live.getSnapshot()), `effects after ${event.type}`).toEqual(effectsOf(folded));
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
