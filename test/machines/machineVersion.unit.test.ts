import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  agentStateOf,
  foldEvents,
  sessionMachine,
  SESSION_MACHINE_VERSION,
  upcasterFor,
  type Upcaster,
} from '../../machines/index.ts';
import { StoredEvent } from '../../protocol/index.ts';
import { NodeHost } from '../../src/host/index.ts';
import { scriptedAgent } from '../../src/agent/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { memoryStores } from '../../src/store/index.ts';
import { MACHINE_VERSION_HASHES } from './machineVersions.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TABLE = 'test/machines/machineVersions.ts';
const FIXTURES = join(ROOT, 'test/fixtures');

/** The machine's definition (as the visualizer sees it) and every source file of machines/, hashed. */
function machineHash(): string {
  const hash = createHash('sha256');
  hash.update(JSON.stringify(sessionMachine.root.definition));
  for (const name of readdirSync(join(ROOT, 'machines')).sort()) {
    hash.update(`\n--- ${name}\n`);
    hash.update(readFileSync(join(ROOT, 'machines', name)));
  }
  return hash.digest('hex');
}

interface Fixture {
  machine_version: number;
  recorded_with: string;
  events: unknown[];
  states: Array<{ id: number; agent_state: string; value: string }>;
}

/** The versions with recorded logs: one directory `machine-vN` each, oldest first. */
function fixtureVersions(): number[] {
  return readdirSync(FIXTURES)
    .map((name) => /^machine-v(\d+)$/.exec(name)?.[1])
    .filter((version) => version !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
}

function fixtures(version: number): Array<{ name: string; fixture: Fixture }> {
  const dir = join(FIXTURES, `machine-v${version}`);
  return readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .sort()
    .map((name) => ({ name, fixture: JSON.parse(readFileSync(join(dir, name), 'utf8')) as Fixture }));
}

describe('machine versions', () => {
  it('has an entry for the current version that matches machines/: a change there without a version bump fails', () => {
    const hash = machineHash();
    expect(
      MACHINE_VERSION_HASHES[SESSION_MACHINE_VERSION],
      `machines/ changed: bump SESSION_MACHINE_VERSION (machines/sessionContext.ts), add an upcaster entry for what the bump reinterprets, and add "${SESSION_MACHINE_VERSION in MACHINE_VERSION_HASHES ? SESSION_MACHINE_VERSION + 1 : SESSION_MACHINE_VERSION}: '<hash>'" to ${TABLE} (the hash of this version is ${hash})`,
    ).toBe(hash);
    expect(Math.max(...Object.keys(MACHINE_VERSION_HASHES).map(Number))).toBe(SESSION_MACHINE_VERSION);
  });

  it('never changes an existing entry of the table (checked against the git history of the table)', () => {
    if (!existsSync(join(ROOT, '.git'))) return expect(MACHINE_VERSION_HASHES).toBeDefined();
    const history = execFileSync('git', ['log', '-p', '--format=', '--', TABLE], { cwd: ROOT, encoding: 'utf8' });
    const removed = history.split('\n').filter((line) => /^-\s*\d+:\s*'[0-9a-f]{64}'/.test(line));
    expect(removed, 'lines removed from the version table in its history').toEqual([]);
  });

  it('keeps fixture logs of versions 3 and 4 and of the version before this one, none of a newer one', () => {
    const versions = fixtureVersions();
    expect(versions).toEqual(expect.arrayContaining([3, 4]));
    // A bump ships logs recorded under the version before it.
    if (SESSION_MACHINE_VERSION > 3) expect(versions).toContain(SESSION_MACHINE_VERSION - 1);
    for (const version of versions) {
      expect(version).toBeLessThanOrEqual(SESSION_MACHINE_VERSION);
      expect(fixtures(version).length, `fixtures of machine-v${version}`).toBeGreaterThan(0);
    }
  });

  it('upcasts an old log through every step up to the current version, and refuses a version it has no path from', () => {
    const seen: string[] = [];
    const step = (from: number): Upcaster => ({
      reinterprets: `test ${from}`,
      upcast: (event) => {
        seen.push(`${from}:${event.id}`);
        return event;
      },
    });
    const upcast = upcasterFor(1, { 1: step(1), 2: step(2) }, 3)!;
    const event = StoredEvent.parse(fixtures(3)[0]!.fixture.events[1]);
    upcast(event);
    expect(seen).toEqual(['1:1', '2:1']);
    expect(upcasterFor(3, {}, 3)).toBeNull();
    expect(() => upcasterFor(1, { 2: step(2) }, 3)).toThrow(/no upcaster from machine version 1 to 2/);
    expect(() => upcasterFor(4, {}, 3)).toThrow(/newer than this machine/);
    // Every version since logs recorded one has a path to this one.
    for (let v = 3; v <= SESSION_MACHINE_VERSION; v++) expect(() => upcasterFor(v)).not.toThrow();
  });
});

for (const version of fixtureVersions()) {
  describe(`logs recorded under machine version ${version}`, () => {
    it.each(fixtures(version))(
      '$name still parses and folds to the same agent state and statechart value at every event',
      ({ fixture }) => {
        expect(fixture.machine_version).toBe(version);
        expect(fixture.recorded_with).toMatch(/^[0-9a-f]{40}$/);
        const events = fixture.events.map((e) => StoredEvent.parse(e));
        expect(events[0]).toMatchObject({ type: 'conversation_created' });
        // Version 3 logs predate the field; later ones record the version that created them.
        const recorded = version === 3 ? undefined : version;
        expect(events[0]!.type === 'conversation_created' && events[0].data.machine_version).toBe(recorded);
        expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i));
        expect(fixture.states.map((s) => s.id)).toEqual(events.map((e) => e.id));
        const states: Array<{ agent_state: string; value: string }> = [];
        for (let i = 1; i <= events.length; i++) {
          const { snapshot } = foldEvents(events.slice(0, i));
          states.push({ agent_state: agentStateOf(snapshot), value: JSON.stringify(snapshot.value) });
        }
        expect(states.map((s) => s.agent_state)).toEqual(fixture.states.map((s) => s.agent_state));
        expect(states.map((s) => s.value)).toEqual(fixture.states.map((s) => s.value));
      },
    );

    const upgraded = version < SESSION_MACHINE_VERSION;
    it(
      upgraded
        ? `come back under this version with \`machine_upgraded {from: ${version}, to}\` stored before \`session_rehydrated\``
        : 'come back under this version with `session_rehydrated` and no `machine_upgraded`',
      async () => {
        const stores = memoryStores();
        const manager = new NodeHost({
          ...stores,
          runtimes: memoryRuntimeProvider(),
          agentFor: () => scriptedAgent(),
        });
        try {
          for (const { fixture } of fixtures(version)) {
            const events = fixture.events.map((e) => StoredEvent.parse(e));
            const created = events[0]!;
            if (created.type !== 'conversation_created') throw new Error('a fixture starts with its creation');
            let seq = 0;
            for (const event of events) seq = (await stores.log.append(event, { expectedLastSeq: seq })).seq;
            const id = created.conversation_id;
            await stores.conversations.put({
              conversation_id: id,
              user: created.data.user,
              created_at: created.ts,
              state: 'awaiting_user_input',
              in_memory: false,
            });
            const before = agentStateOf(foldEvents(events).snapshot);
            const session = await manager.session(id, created.data.user);
            const after = (await stores.log.read(id, { afterSeq: seq })).items.map((i) => i.event);
            const types = after.map((e) => e.type);
            if (upgraded) {
              expect(types.slice(0, 2)).toEqual(
                after[0]?.type === 'agent_state_changed'
                  ? ['agent_state_changed', 'machine_upgraded']
                  : ['machine_upgraded', 'session_rehydrated'],
              );
              expect(after.find((e) => e.type === 'machine_upgraded')).toMatchObject({
                data: { from: version, to: SESSION_MACHINE_VERSION },
              });
            } else {
              const expected =
                after[0]?.type === 'agent_state_changed'
                  ? ['agent_state_changed', 'session_rehydrated']
                  : ['session_rehydrated'];
              expect(types.slice(0, expected.length)).toEqual(expected);
              expect(types).not.toContain('machine_upgraded');
            }
            // No snapshot was stored: the whole log is folded.
            expect(after.find((e) => e.type === 'session_rehydrated')).toMatchObject({
              data: { from: 'log', events_folded: events.length },
            });
            expect(session.snapshot?.context.machineVersion).toBe(SESSION_MACHINE_VERSION);
            // The whole log, old part and new, folds to the live session's state.
            const all = (await stores.log.read(id)).items.map((i) => i.event);
            expect(agentStateOf(foldEvents(all).snapshot)).toBe(session.state);
            expect(foldEvents(all).snapshot.context.machineVersion).toBe(SESSION_MACHINE_VERSION);
            if (before !== 'running') expect(session.state).toBe(before);
          }
        } finally {
          await manager.shutdown();
        }
      },
    );
  });
}
