import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { and, createMachine, setup, type AnyStateMachine, type AnyStateNode } from 'xstate';
import { SESSION_MACHINE_VERSION, sessionMachine } from '../../machines/index.ts';
import { machineConfigJson, machineEntries, machinesCommand, machinesDocument } from '../../src/cli/machines.ts';

function allNodes(node: AnyStateNode): AnyStateNode[] {
  return [node, ...Object.values(node.states as Record<string, AnyStateNode>).flatMap(allNodes)];
}

/** A machine's shape, independent of how it was built: per state, its transitions, tags, description, initial. */
function shape(machine: AnyStateMachine) {
  return allNodes(machine.root).map((node) => ({
    id: node.id,
    type: node.type,
    tags: node.tags,
    description: node.description,
    initial: node.type === 'compound' ? node.initial.target.map((t) => t.id) : [],
    transitions: [...node.transitions.entries(), ['(always)', node.always ?? []] as const].flatMap(([event, list]) =>
      list.map((t) => ({ event, targets: (t.target ?? []).map((s) => s.id), guarded: t.guard !== undefined })),
    ),
  }));
}

function captured() {
  const out = { stdout: '', stderr: '' };
  return { out, io: { stdout: (t: string) => void (out.stdout += t), stderr: (t: string) => void (out.stderr += t) } };
}

describe('tether machines', () => {
  it('prints JSON that holds the session machine by id with its version', async () => {
    const { out, io } = captured();
    expect(await machinesCommand([], io)).toBe(0);
    const doc = JSON.parse(out.stdout) as { machines: Record<string, unknown> };
    expect(Object.keys(doc.machines)).toEqual([sessionMachine.id]);
    expect(doc.machines[sessionMachine.id]).toMatchObject({
      export: 'sessionMachine',
      version: SESSION_MACHINE_VERSION,
      config: { id: sessionMachine.id },
    });
    expect(out.stderr).toBe('');
  });

  it('contains every state of the session machine at its place in the config', () => {
    const config = machineConfigJson(sessionMachine) as { states?: Record<string, unknown> };
    const found: string[] = [];
    const walk = (node: { states?: Record<string, unknown> }, path: string[]) => {
      for (const [key, child] of Object.entries(node.states ?? {})) {
        found.push([sessionMachine.id, ...path, key].join('.'));
        walk(child as { states?: Record<string, unknown> }, [...path, key]);
      }
    };
    walk(config, []);
    const expected = allNodes(sessionMachine.root)
      .slice(1)
      .map((node) => node.id);
    expect(found.sort()).toEqual(expected.sort());
  });

  it('round-trips the session machine through createMachine with every transition, guard, tag and description', () => {
    const config = JSON.parse(JSON.stringify(machineConfigJson(sessionMachine)));
    const rebuilt = createMachine(config);
    expect(shape(rebuilt)).toEqual(shape(sessionMachine));
  });

  it('keeps eventless transitions and higher-order guards, which machine.toJSON() drops', () => {
    const machine = setup({ guards: { a: () => true, b: () => true } }).createMachine({
      id: 'm',
      initial: 'x',
      states: {
        x: { always: { guard: 'a', target: 'y' }, on: { go: { guard: and(['a', 'b']), target: 'y' } } },
        y: {},
      },
    });
    const x = (machineConfigJson(machine).states as Record<string, Record<string, unknown>>).x!;
    expect(x.always).toEqual([{ target: ['#m.y'], guard: 'a' }]);
    expect(x.on).toEqual({ go: [{ target: ['#m.y'], guard: 'and(a, b)' }] });
  });

  it('prints only the named machine config with --id, ready to paste into createMachine', async () => {
    const { out, io } = captured();
    expect(await machinesCommand(['--id', sessionMachine.id], io)).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual(machineConfigJson(sessionMachine));
  });

  it('writes the same JSON to the file named by --out, and nothing to stdout', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tether-machines-'));
    onTestFinished(() => rm(dir, { recursive: true, force: true }));
    const file = join(dir, 'machines.json');
    const { out, io } = captured();
    expect(await machinesCommand(['--out', file], io)).toBe(0);
    expect(out.stdout).toBe('');
    expect(JSON.parse(await readFile(file, 'utf8'))).toEqual(machinesDocument());
  });

  it('refuses an unknown machine id or option with exit code 2 and says why on stderr', async () => {
    const unknown = captured();
    expect(await machinesCommand(['--id', 'nope'], unknown.io)).toBe(2);
    expect(unknown.out.stderr).toMatch(/no machine with id "nope" \(known: session\)/);
    expect(unknown.out.stdout).toBe('');
    const bad = captured();
    expect(await machinesCommand(['--frobnicate'], bad.io)).toBe(2);
    expect(bad.out.stderr).toMatch(/frobnicate/);
  });

  it('finds machines among a module’s exports and their <NAME>_MACHINE_VERSION by convention', () => {
    const fooBarMachine = createMachine({ id: 'fooBar' });
    const entries = machineEntries({ fooBarMachine, FOO_BAR_MACHINE_VERSION: 7, unrelated: 1, plainObject: {} });
    expect(entries).toEqual([{ exportName: 'fooBarMachine', machine: fooBarMachine, version: 7 }]);
    expect(machinesDocument(machineEntries({ fooBarMachine })).machines).toMatchObject({ fooBar: { version: null } });
  });
});
