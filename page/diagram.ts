import type { AnyStateNode, StateValue } from 'xstate';
import { sessionMachine, statePaths } from '../machines/index.ts';
import { h } from './dom.ts';

/** A transition of a state as a reader sees it: the event, and where it goes (empty: it stays). */
interface Edge {
  event: string;
  targets: string[];
  guarded: boolean;
}

function edgesOf(node: AnyStateNode): Edge[] {
  const edges: Edge[] = [];
  for (const [event, transitions] of node.transitions) {
    for (const t of transitions) {
      edges.push({
        event,
        targets: (t.target ?? []).map((target) => target.path.join('.')),
        guarded: t.guard !== undefined,
      });
    }
  }
  return edges;
}

/**
 * The session statechart as nested boxes (a Harel diagram): one box per
 * state, its substates inside it, and its transitions as `event → target`
 * chips. `highlight` marks the boxes of a state value (the active leaves and
 * their ancestors) with the class `active`.
 */
export class Diagram {
  readonly element: HTMLElement;
  readonly #boxes = new Map<string, HTMLElement>();

  constructor() {
    this.element = h('div', { class: 'diagram', 'data-testid': 'diagram' });
    for (const child of Object.values(sessionMachine.root.states)) this.element.append(this.#box(child));
  }

  #box(node: AnyStateNode): HTMLElement {
    const path = node.path.join('.');
    const kids = Object.values(node.states);
    const edges = edgesOf(node);
    const box = h(
      'section',
      {
        class: `state${kids.length ? ' compound' : ''}${node.type === 'final' ? ' final' : ''}`,
        'data-state': path,
        title: node.description ?? '',
      },
      h(
        'div',
        { class: 'state-name' },
        node.key,
        node.tags.length ? h('span', { class: 'tags' }, node.tags.join(' ')) : null,
      ),
      edges.length
        ? h(
            'ul',
            { class: 'edges' },
            ...edges.map((e) =>
              h(
                'li',
                { 'data-event': e.event },
                e.event,
                e.guarded ? h('span', { class: 'guard' }, ' [guard]') : null,
                e.targets.length ? ` → ${e.targets.map((t) => t.split('.').at(-1)).join(', ')}` : '',
              ),
            ),
          )
        : null,
      kids.length ? h('div', { class: 'children' }, ...kids.map((kid) => this.#box(kid))) : null,
    );
    this.#boxes.set(path, box);
    return box;
  }

  /** Marks the states of a state value (active leaves and their ancestors); `from`: the states a transition left. */
  highlight(value: StateValue, from?: readonly string[]): void {
    const leaves = statePaths(value);
    const active = new Set<string>();
    for (const leaf of leaves) {
      const parts = leaf.split('.');
      for (let i = 1; i <= parts.length; i++) active.add(parts.slice(0, i).join('.'));
    }
    const previous = new Set(from ?? []);
    for (const [path, box] of this.#boxes) {
      box.classList.toggle('active', active.has(path));
      box.classList.toggle('leaf', leaves.includes(path));
      box.classList.toggle('previous', previous.has(path) && !active.has(path));
    }
  }
}
