// Renders statecharts as Mermaid `stateDiagram-v2` and a Markdown table, from
// the machines' own state nodes: nothing here knows a state's name.
import type { AnyStateMachine, AnyStateNode, AnyTransitionDefinition } from 'xstate';
import {
  actionLabel,
  guardLabel,
  machineEntries,
  ownActions,
  stateNodesOf,
  triggerOf,
  type MachineEntry,
} from '../src/cli/machines.ts';

/** A transition of `source` as drawn: its trigger, its guard, where it goes. */
export interface DrawnTransition {
  source: AnyStateNode;
  /** `event`, `always`, `after 5000`, `onDone`, `done <actor>` or `error <actor>`. */
  trigger: string;
  guard: string | undefined;
  actions: string[];
  targets: AnyStateNode[];
}

function triggerText({ kind, key }: ReturnType<typeof triggerOf>): string {
  switch (kind) {
    case 'event':
      return key;
    case 'after':
      return `after ${key}`;
    case 'done':
      return 'onDone';
    case 'invoke.done':
      return `done ${key}`;
    case 'invoke.error':
      return `error ${key}`;
  }
}

/** Every transition a state node declares (its `on`, `always`, `after`, `onDone`, invoke results), in order. */
export function transitionsOf(node: AnyStateNode): DrawnTransition[] {
  const drawn = (t: AnyTransitionDefinition, trigger: string): DrawnTransition => ({
    source: node,
    trigger,
    guard: guardLabel(t.guard),
    actions: t.actions.map(actionLabel),
    targets: [...(t.target ?? [])],
  });
  const out: DrawnTransition[] = [];
  for (const [eventType, list] of node.transitions) {
    const trigger = triggerText(triggerOf(node, eventType));
    out.push(...list.map((t) => drawn(t, trigger)));
  }
  out.push(...(node.always ?? []).map((t) => drawn(t, 'always')));
  return out;
}

/**
 * The Mermaid id of a state node: its xstate id (`session.active.error`) when
 * Mermaid takes it as it is, else with the other characters replaced by `_`.
 */
export function mermaidId(id: string): string {
  return id.replace(/[^A-Za-z0-9_.]/g, '_');
}

/** Mermaid reads `;` as a line end and `#…;` as an entity, and a label runs to the end of its line. */
function mermaidText(text: string): string {
  return text.replace(/#/g, '#35;').replace(/;/g, '#59;').replace(/"/g, '#quot;').replace(/\s+/g, ' ');
}

function transitionLabel(t: DrawnTransition): string {
  return mermaidText(t.guard === undefined ? t.trigger : `${t.trigger} [${t.guard}]`);
}

function declare(node: AnyStateNode, ids: Map<AnyStateNode, string>, indent: string, lines: string[]): void {
  const id = ids.get(node)!;
  const label = `state "${mermaidText(node.key)}" as ${id}`;
  const children = Object.values(node.states as Record<string, AnyStateNode>);
  if (children.length === 0) {
    lines.push(`${indent}${label}`);
    return;
  }
  lines.push(`${indent}${label} {`);
  if (node.type === 'compound') {
    for (const target of node.initial.target) lines.push(`${indent}  [*] --> ${ids.get(target)!}`);
  }
  children.forEach((child, i) => {
    if (node.type === 'parallel' && i > 0) lines.push(`${indent}  --`);
    declare(child, ids, `${indent}  `, lines);
    if (child.type === 'final') lines.push(`${indent}  ${ids.get(child)!} --> [*]`);
  });
  lines.push(`${indent}}`);
}

/**
 * The machine as a Mermaid `stateDiagram-v2`: the root and every compound
 * state as a composite with its initial state, every transition with a target
 * as an arrow labelled `trigger [guard]`. Transitions without a target change
 * no state and are left to the table (see `statesTable`).
 */
export function mermaidStateDiagram(machine: AnyStateMachine): string {
  const nodes = stateNodesOf(machine.root);
  const ids = new Map(nodes.map((node) => [node, mermaidId(node.id)]));
  const seen = new Map<string, string>();
  for (const node of nodes) {
    const other = seen.get(ids.get(node)!);
    if (other !== undefined)
      throw new Error(`states ${other} and ${node.id} would share the Mermaid id ${ids.get(node)}`);
    seen.set(ids.get(node)!, node.id);
  }
  const lines = ['stateDiagram-v2', `  [*] --> ${ids.get(machine.root)!}`];
  declare(machine.root, ids, '  ', lines);
  for (const t of nodes.flatMap(transitionsOf)) {
    for (const target of t.targets)
      lines.push(`  ${ids.get(t.source)!} --> ${ids.get(target)!}: ${transitionLabel(t)}`);
  }
  return lines.join('\n');
}

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\s+/g, ' ').trim();
}

function code(items: string[]): string {
  return items.map((item) => `\`${item}\``).join(', ');
}

/** Own tags as they are, tags that a state shows because an enclosing state has them in parentheses. */
function tagsCell(node: AnyStateNode): string {
  const own = node.tags.map((tag) => `\`${tag}\``);
  const inherited: string[] = [];
  for (let parent = node.parent; parent; parent = parent.parent) {
    for (const tag of parent.tags) if (!node.tags.includes(tag)) inherited.push(`(\`${tag}\`)`);
  }
  return [...own, ...inherited].join(', ');
}

/** One row per state node: id, agent-state tags, description, entry actions and invoked actors, events handled in place. */
export function statesTable(machine: AnyStateMachine): string {
  const rows = stateNodesOf(machine.root).map((node) => {
    const invokes = node.invoke.map((i) => `invoke ${typeof i.src === 'string' ? i.src : i.id}`);
    const onEntry = [...ownActions(node, 'entry').map(actionLabel), ...invokes];
    const inPlace = transitionsOf(node)
      .filter((t) => t.targets.length === 0)
      .map((t) => (t.guard === undefined ? t.trigger : `${t.trigger} [${t.guard}]`));
    const cells = [
      `\`${node.id}\``,
      tagsCell(node),
      node.description ?? '',
      code(onEntry),
      code([...new Set(inPlace)]),
    ];
    return `| ${cells.map(cell).join(' | ')} |`;
  });
  return [
    '| State | Agent state (tag) | Description | On entry | Handled in place |',
    '| --- | --- | --- | --- | --- |',
    ...rows,
  ].join('\n');
}

function machineSection({ exportName, machine, version }: MachineEntry): string {
  const title = `## \`${machine.id}\` (\`${exportName}\`${version === null ? '' : `, version ${version}`})`;
  return [
    title,
    ...(machine.root.description ? ['', machine.root.description] : []),
    '',
    '```mermaid',
    mermaidStateDiagram(machine),
    '```',
    '',
    statesTable(machine),
    '',
    'A tag in parentheses comes from an enclosing state. "Handled in place" lists the events (with their guards) that',
    'run actions without leaving the state.',
  ].join('\n');
}

/** docs/statecharts.md: every machine that machines/index.ts exports. */
export function statechartsMarkdown(entries: MachineEntry[] = machineEntries()): string {
  return [
    '# Statecharts',
    '',
    '<!-- Generated by `npm run docs` (scripts/statecharts.ts) from the machines that machines/index.ts exports.',
    '     Do not edit: test/docs/statecharts.unit.test.ts fails when this file differs from what it generates. -->',
    '',
    'Every machine in [`machines/`](../machines/), drawn from its own definition. Arrows are labelled',
    '`event [guard]`; `always` is an eventless transition, taken as soon as its guard holds; `[*]` marks the',
    'initial state of each level. `tether machines` prints the same machines as JSON for the Stately',
    'visualizer, and `tether replay <conversation_id>` walks a stored conversation through them.',
    '',
    'The machines run nothing: every action only assigns context. What a state asks for (a runtime, an agent',
    'step, a command, a deadline) is read from it by `effectsOf` ([machines/effects.ts](../machines/effects.ts)),',
    'and what gets stored when is decided by `decide` ([machines/decide.ts](../machines/decide.ts)), beside them.',
    '',
    entries.map(machineSection).join('\n\n'),
    '',
  ].join('\n');
}
