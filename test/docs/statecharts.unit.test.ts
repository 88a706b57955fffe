import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { and, createMachine, not, setup, type AnyStateMachine, type AnyStateNode } from 'xstate';
import { sessionMachine } from '../../machines/index.ts';
import { mermaidStateDiagram, statechartsMarkdown, statesTable } from '../../scripts/statecharts.ts';

/** Every state node, found by walking `.states` here rather than with the renderer's own walk. */
function allNodes(node: AnyStateNode): AnyStateNode[] {
  const children = Object.values(node.states as Record<string, AnyStateNode>);
  return [node, ...children.flatMap(allNodes)];
}

function arrows(diagram: string): string[] {
  return diagram.split('\n').filter((line) => line.includes(' --> ') && !line.includes('[*]'));
}

describe('docs/statecharts.md', () => {
  it('is exactly what the generator writes from the machines now (run `npm run docs` after changing a machine)', () => {
    const committed = readFileSync(new URL('../../docs/statecharts.md', import.meta.url), 'utf8');
    expect(committed).toBe(statechartsMarkdown());
  });

  it('declares every state node of the session machine in its diagram, by id', () => {
    const diagram = mermaidStateDiagram(sessionMachine);
    const nodes = allNodes(sessionMachine.root);
    expect(nodes.length).toBeGreaterThan(1);
    for (const node of nodes) expect(diagram).toContain(`state "${node.key}" as ${node.id}`);
  });

  it('draws every transition of the session machine that has a target, labelled with its event', () => {
    const lines = arrows(mermaidStateDiagram(sessionMachine));
    let expected = 0;
    for (const node of allNodes(sessionMachine.root)) {
      const byEvent = [...node.transitions.entries(), ['always', node.always ?? []] as const];
      for (const [event, list] of byEvent) {
        for (const t of list) {
          for (const target of t.target ?? []) {
            expected += 1;
            const arrow = `  ${node.id} --> ${target.id}: ${event}`;
            expect(
              lines.some((line) => line.startsWith(arrow)),
              arrow,
            ).toBe(true);
          }
        }
      }
    }
    expect(lines).toHaveLength(expected);
  });

  it('lists every state node of the session machine in the table with its description', () => {
    const table = statesTable(sessionMachine);
    for (const node of allNodes(sessionMachine.root)) {
      const row = table.split('\n').find((line) => line.startsWith(`| \`${node.id}\` |`));
      expect(row, node.id).toBeDefined();
      if (node.description) expect(row).toContain(node.description.replace(/\|/g, '\\|'));
    }
  });
});

describe('the statechart renderer', () => {
  const machine = setup({
    guards: { isReady: () => true, isFull: () => false, has: (_, params: { n: number }) => params.n > 0 },
    actions: { log: () => {} },
  }).createMachine({
    id: 'demo',
    initial: 'idle',
    states: {
      idle: {
        description: 'Waits | sleeps.',
        tags: ['quiet'],
        on: {
          go: [
            { guard: and(['isReady', not('isFull')]), target: 'busy' },
            { guard: { type: 'has', params: { n: 2 } }, target: 'busy' },
          ],
          ping: { actions: 'log' },
        },
        after: { 1000: 'done' },
      },
      busy: {
        type: 'parallel',
        states: {
          left: { initial: 'a', states: { a: { on: { next: 'b' } }, b: {} } },
          right: { initial: 'c', states: { c: { always: { guard: 'isReady', target: 'd' } }, d: {} } },
        },
        onDone: 'done',
      },
      done: { type: 'final' },
    },
  });

  it('labels higher-order and parameterized guards, delays and eventless transitions', () => {
    const diagram = mermaidStateDiagram(machine);
    expect(diagram).toContain('demo.idle --> demo.busy: go [and(isReady, not(isFull))]');
    expect(diagram).toContain('demo.idle --> demo.busy: go [has(2)]');
    expect(diagram).toContain('demo.idle --> demo.done: after 1000');
    expect(diagram).toContain('demo.busy.right.c --> demo.busy.right.d: always [isReady]');
    expect(diagram).toContain('demo.busy --> demo.done: onDone');
  });

  it('nests composite states with their initial state, separates parallel regions and ends final states', () => {
    const lines = mermaidStateDiagram(machine)
      .split('\n')
      .map((line) => line.trim());
    const left = lines.indexOf('state "left" as demo.busy.left {');
    expect(left).toBeGreaterThan(lines.indexOf('state "busy" as demo.busy {'));
    expect(lines[left + 1]).toBe('[*] --> demo.busy.left.a');
    expect(lines).toContain('--');
    expect(lines).toContain('demo.done --> [*]');
  });

  it('keeps transitions without a target out of the diagram and in the table, and escapes table cells', () => {
    expect(mermaidStateDiagram(machine)).not.toContain('ping');
    const row = statesTable(machine)
      .split('\n')
      .find((line) => line.startsWith('| `demo.idle` |'));
    expect(row).toBe('| `demo.idle` | `quiet` | Waits \\| sleeps. |  | `ping` |');
  });

  it('refuses two states that would share a Mermaid id', () => {
    const clash: AnyStateMachine = createMachine({ id: 'm', initial: 'a-b', states: { 'a-b': {}, a_b: {} } });
    expect(() => mermaidStateDiagram(clash)).toThrow(/share the Mermaid id/);
  });
});
