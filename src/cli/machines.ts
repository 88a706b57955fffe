import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { StateMachine, type AnyStateMachine, type AnyStateNode, type AnyTransitionDefinition } from 'xstate';
import * as machinesModule from '../../machines/index.ts';
import { processIO, type CliIO } from './io.ts';

/** A machine exported by machines/index.ts, with its persisted-snapshot version when one is exported. */
export interface MachineEntry {
  /** The export's name, e.g. `sessionMachine`. */
  exportName: string;
  machine: AnyStateMachine;
  /** `<NAME>_MACHINE_VERSION` for `<name>Machine` (e.g. SESSION_MACHINE_VERSION), null when absent. */
  version: number | string | null;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** Every state machine that machines/index.ts exports, in export order. */
export function machineEntries(module: Record<string, unknown> = machinesModule): MachineEntry[] {
  const entries: MachineEntry[] = [];
  for (const [exportName, value] of Object.entries(module)) {
    if (!(value instanceof StateMachine)) continue;
    const versionName = `${exportName.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()}_VERSION`;
    const version = module[versionName];
    entries.push({
      exportName,
      machine: value,
      version: typeof version === 'number' || typeof version === 'string' ? version : null,
    });
  }
  return entries;
}

/** Every state node under (and including) `node`, parents before children, in document order. */
export function stateNodesOf(node: AnyStateNode): AnyStateNode[] {
  return [node, ...Object.values(node.states as Record<string, AnyStateNode>).flatMap(stateNodesOf)];
}

/** Parameters as a reader sees them: `stopped` for `{state: 'stopped'}`, `a: 1, b: x` for several. */
function paramsText(params: unknown): string {
  if (typeof params === 'function') return '…';
  const text = (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value));
  if (typeof params !== 'object' || params === null) return text(params);
  const entries = Object.entries(params);
  return entries.length === 1
    ? text(entries[0]![1])
    : entries.map(([key, value]) => `${key}: ${text(value)}`).join(', ');
}

/** `name` or `name(params)` for a named guard or action given as a string or `{type, params}`. */
function namedLabel(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value !== 'object' || value === null || !('type' in value)) return undefined;
  const params = (value as { params?: unknown }).params;
  return params === undefined ? String(value.type) : `${String(value.type)}(${paramsText(params)})`;
}

/**
 * A guard as a reader sees it: `name`, `name(param)` for a parameterized one,
 * `and(a, b)`, `not(a)`, `stateIn(...)` for higher-order guards.
 */
export function guardLabel(guard: unknown): string | undefined {
  if (guard === undefined || guard === null) return undefined;
  if (typeof guard === 'function') {
    const g = guard as { name?: string; guards?: unknown[]; stateValue?: unknown };
    if (Array.isArray(g.guards)) return `${g.name || 'guard'}(${g.guards.map((x) => guardLabel(x) ?? '?').join(', ')})`;
    if (g.stateValue !== undefined) return `stateIn(${JSON.stringify(g.stateValue)})`;
    return g.name && g.name !== 'guard' ? g.name : 'inline guard';
  }
  return namedLabel(guard) ?? 'guard';
}

/** An action as a reader sees it: `name`, `name(param)`, or xstate's built-in type (`xstate.assign`) for an inline one. */
export function actionLabel(action: unknown): string {
  if (typeof action === 'function') {
    const a = action as { type?: unknown; name?: string };
    return typeof a.type === 'string' ? a.type : a.name || 'inline action';
  }
  return namedLabel(action) ?? 'inline action';
}

/** A named guard or action for the JSON config: the name, or `{type, params}` when its params are data. */
function namedJson(value: unknown, label: string): Json {
  if (typeof value !== 'object' || value === null || !('type' in value)) return label;
  const params = (value as { params?: unknown }).params;
  if (params === undefined || typeof params === 'function') return label;
  return { type: String(value.type), params: JSON.parse(JSON.stringify(params)) as Json };
}

/**
 * A node's entry or exit actions as written: without the `raise`/`cancel` of
 * its delayed events, which xstate adds to implement `after`.
 */
export function ownActions(node: AnyStateNode, which: 'entry' | 'exit'): unknown[] {
  const delayed = new Set(node.after.map((t): unknown => t.eventType));
  const actions: unknown[] = node[which];
  return actions.filter((action) => {
    const a = action as { type?: unknown; id?: unknown; sendId?: unknown };
    if (a.type === 'xstate.raise') return !delayed.has(a.id);
    if (a.type === 'xstate.cancel') return !delayed.has(a.sendId);
    return true;
  });
}

export type TriggerKind = 'event' | 'after' | 'done' | 'invoke.done' | 'invoke.error';

/**
 * What makes a transition of `node` fire, from the event type xstate files it
 * under: a plain event, a delay (`after`), the node's own completion
 * (`onDone`), or an invoked actor's result.
 */
export function triggerOf(node: AnyStateNode, eventType: string): { kind: TriggerKind; key: string } {
  const delayed = node.after.find((t) => t.eventType === eventType);
  if (delayed) return { kind: 'after', key: String(delayed.delay) };
  if (eventType === `xstate.done.state.${node.id}`) return { kind: 'done', key: 'onDone' };
  for (const invoke of node.invoke) {
    if (eventType === `xstate.done.actor.${invoke.id}`) return { kind: 'invoke.done', key: invoke.id };
    if (eventType === `xstate.error.actor.${invoke.id}`) return { kind: 'invoke.error', key: invoke.id };
  }
  return { kind: 'event', key: eventType };
}

function transitionJson(t: AnyTransitionDefinition): JsonObject {
  const out: JsonObject = {};
  if (t.target?.length) out.target = t.target.map((n) => `#${n.id}`);
  const guard = guardLabel(t.guard);
  if (guard) out.guard = namedJson(t.guard, guard);
  if (t.actions.length) out.actions = actionsJson(t.actions);
  if (t.reenter) out.reenter = true;
  if (typeof t.description === 'string') out.description = t.description;
  return out;
}

function actionsJson(actions: readonly unknown[]): Json[] {
  return actions.map((action) => namedJson(action, actionLabel(action)));
}

function invokeSrc(invoke: { id: string; src: unknown }): string {
  return typeof invoke.src === 'string' ? invoke.src : invoke.id;
}

function transitionsJson(node: AnyStateNode, out: JsonObject): void {
  const on: JsonObject = {};
  const after: JsonObject = {};
  const invokes = node.invoke.map((invoke): JsonObject => ({ id: invoke.id, src: invokeSrc(invoke) }));
  for (const [eventType, list] of node.transitions) {
    const json = list.map(transitionJson);
    const trigger = triggerOf(node, eventType);
    if (trigger.kind === 'after') after[trigger.key] = json;
    else if (trigger.kind === 'done') out.onDone = json;
    else if (trigger.kind === 'event') on[eventType] = json;
    else {
      const invoke = invokes[node.invoke.findIndex((i) => i.id === trigger.key)]!;
      invoke[trigger.kind === 'invoke.done' ? 'onDone' : 'onError'] = json;
    }
  }
  if (invokes.length) out.invoke = invokes;
  if (Object.keys(on).length) out.on = on;
  if (node.always?.length) out.always = node.always.map(transitionJson);
  if (Object.keys(after).length) out.after = after;
}

function stateNodeJson(node: AnyStateNode): JsonObject {
  const out: JsonObject = {};
  const defaultId = [node.machine.id, ...node.path].join('.');
  if (node.parent === undefined || node.id !== defaultId) out.id = node.id;
  if (node.type === 'parallel' || node.type === 'final' || node.type === 'history') out.type = node.type;
  if (node.type === 'history' && node.history) out.history = node.history;
  if (typeof node.description === 'string') out.description = node.description;
  if (node.type === 'compound') {
    const target = node.initial.target[0];
    if (target) out.initial = target.path.slice(node.path.length).join('.');
  }
  if (node.tags.length) out.tags = [...node.tags];
  const entry = ownActions(node, 'entry');
  const exit = ownActions(node, 'exit');
  if (entry.length) out.entry = actionsJson(entry);
  if (exit.length) out.exit = actionsJson(exit);
  transitionsJson(node, out);
  const children = Object.entries(node.states as Record<string, AnyStateNode>);
  if (children.length) out.states = Object.fromEntries(children.map(([key, child]) => [key, stateNodeJson(child)]));
  return out;
}

/**
 * The machine as a `createMachine(...)` config in plain JSON, what the Stately
 * editor imports and the legacy visualizer takes: states, transitions with
 * `#id` targets, guards, actions, tags, descriptions. Implementations are
 * names only. Built from the state nodes rather than `machine.toJSON()`, which
 * in xstate 5.33 drops `always` transitions and higher-order guards.
 */
export function machineConfigJson(machine: AnyStateMachine): JsonObject {
  return stateNodeJson(machine.root);
}

/** What `tether machines` writes: every machine keyed by id, with its version and config. */
export function machinesDocument(entries: MachineEntry[] = machineEntries()): JsonObject {
  const machines: JsonObject = {};
  for (const { exportName, machine, version } of entries) {
    machines[machine.id] = { export: exportName, version, config: machineConfigJson(machine) };
  }
  return { machines };
}

const USAGE = `usage: tether machines [--id MACHINE_ID] [--out FILE]

Writes the statechart definitions as JSON: {"machines": {<id>: {export, version, config}}}.
Each config is a createMachine() config: paste it into createMachine(...) in the
Stately editor (stately.ai) to see and simulate the machine.
  --id ID     write only that machine's config (ready to paste)
  --out FILE  write to FILE instead of stdout`;

/** `tether machines`: resolves with the exit code. */
export async function machinesCommand(argv: string[], io: CliIO = processIO): Promise<number> {
  let values: { id?: string; out?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { id: { type: 'string' }, out: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    io.stderr(`tether machines: ${err instanceof Error ? err.message : String(err)}\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    io.stdout(`${USAGE}\n`);
    return 0;
  }
  const document = machinesDocument();
  let output: Json = document;
  if (values.id !== undefined) {
    const machines = document.machines as Record<string, { config: Json }>;
    const entry = machines[values.id];
    if (!entry) {
      const known = Object.keys(machines).join(', ');
      io.stderr(`tether machines: no machine with id ${JSON.stringify(values.id)} (known: ${known})\n`);
      return 2;
    }
    output = entry.config;
  }
  const text = `${JSON.stringify(output, null, 2)}\n`;
  if (values.out === undefined) {
    io.stdout(text);
    return 0;
  }
  try {
    await writeFile(values.out, text);
  } catch (err) {
    io.stderr(`tether machines: cannot write ${values.out}: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  return 0;
}
