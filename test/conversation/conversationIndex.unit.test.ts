import { describe, expect, it } from 'vitest';
import type { StoredEvent } from '../../protocol/index.ts';
import {
  markerAfterApply,
  markerBeforeAppend,
  projectEntries,
  projectEntry,
  settledAfterCrash,
} from '../../src/conversation/conversationIndex.ts';
import { memoryStores } from '../../src/store/index.ts';
import { memoryHost } from '../support/memoryHost.ts';
import { until } from '../support/until.ts';

const ID = 'c1';
let nextId = 0;
function event(type: string, data: Record<string, unknown>, ts = '2026-01-01T00:00:00.000Z'): StoredEvent {
  return { v: 1, id: nextId++, conversation_id: ID, ts, source: 'environment', type, data } as StoredEvent;
}
const created = (ts = '2026-01-01T00:00:00.000Z') =>
  event(
    'conversation_created',
    { user: 'ada', confirmation_mode: false, max_iterations: 5, secret_names: [], replay: false },
    ts,
  );
const state = (s: string, ts?: string) => event('agent_state_changed', { state: s }, ts);

describe('the conversation index as a projection of the log', () => {
  it('starts at creation, follows every state fact, and ends with the conversation', () => {
    const events = [created(), state('running', '2026-01-01T00:00:01.000Z'), state('awaiting_user_input')];
    expect(projectEntries(undefined, events)).toEqual({
      conversation_id: ID,
      user: 'ada',
      created_at: '2026-01-01T00:00:00.000Z',
      state: 'awaiting_user_input',
      in_memory: true,
    });
    expect(projectEntries(undefined, [...events, event('session_closed', { reason: 'deleted' })])).toBeUndefined();
    expect(projectEntry(undefined, state('running'))).toBeUndefined();
  });

  it('keeps when a running spell began across a passivation and a rehydration, and drops it when it ends', () => {
    const began = '2026-01-01T00:00:07.000Z';
    const passivated = projectEntries(undefined, [
      created(),
      state('running', began),
      event('session_passivated', { reason: 'shutdown', state: 'running' }, '2026-01-01T00:00:09.000Z'),
    ]);
    expect(passivated).toMatchObject({ state: 'running', in_memory: false, running_since: Date.parse(began) });
    const back = projectEntries(passivated, [event('session_rehydrated', { from: 'snapshot', events_folded: 3 })]);
    expect(back).toMatchObject({ state: 'running', in_memory: true, running_since: Date.parse(began) });
    expect(projectEntry(back, state('awaiting_user_input'))).not.toHaveProperty('running_since');
  });

  it('dates a fork from its conversation_forked, not from its parent’s copied creation', () => {
    const fork = projectEntries(undefined, [
      created('2025-06-01T00:00:00.000Z'),
      state('awaiting_user_input'),
      event('conversation_forked', { conversation_id: 'parent', seq: 4 }, '2026-03-01T00:00:00.000Z'),
    ]);
    expect(fork).toMatchObject({ created_at: '2026-03-01T00:00:00.000Z', in_memory: true });
  });

  it('raises the marker before a busy or changing decision, and lowers it only after the entry holds the state', () => {
    const idle = projectEntries(undefined, [created(), state('awaiting_user_input')])!;
    const running = projectEntry(idle, state('running'))!;
    expect(markerBeforeAppend('absent', undefined, projectEntry(undefined, created()), [created()])).toBe('unsettled');
    expect(markerBeforeAppend('settled', idle, running, [state('running')])).toBe('unsettled');
    expect(markerBeforeAppend('unsettled', idle, running, [state('running')])).toBeNull();
    expect(markerBeforeAppend('absent', idle, idle, [event('command', { command: 'ls' })])).toBeNull();
    expect(markerAfterApply('unsettled', running, [])).toBeNull();
    expect(markerAfterApply('unsettled', idle, [])).toBe('settle');
    const shutdownMidTask = event('session_passivated', { reason: 'shutdown', state: 'running' });
    expect(markerAfterApply('unsettled', projectEntry(running, shutdownMidTask)!, [shutdownMidTask])).toBeNull();
    const idlePassivation = event('session_passivated', { reason: 'idle', state: 'awaiting_user_input' });
    expect(markerAfterApply('settled', projectEntry(idle, idlePassivation)!, [idlePassivation])).toBe('unmark');
  });

  it('settles a crashed conversation from its last event, out of memory', () => {
    const entry = projectEntries(undefined, [created(), state('running')])!;
    expect(settledAfterCrash(entry, { seq: 9, event: state('stopped') })).toMatchObject({
      state: 'stopped',
      in_memory: false,
    });
    expect(settledAfterCrash(entry, undefined)).toMatchObject({ state: 'running', in_memory: false });
  });

  it('is what the write path stores: the entry of a live conversation equals the projection of its log', async () => {
    const stores = memoryStores();
    const host = memoryHost(stores);
    // The store adds the entry's place in the user's order: the rest is the projection.
    const stored = async (id: string) => {
      const found = await stores.conversations.get('ada', id);
      if (!found) return undefined;
      const { ordinal: _, ...entry } = found;
      return entry;
    };
    const projected = async (id: string) =>
      projectEntries(
        undefined,
        (await stores.log.read(id)).items.map((i) => i.event),
      );
    try {
      const { conversation_id: id } = await host.commands.create('ada', {
        confirmation_mode: false,
        max_iterations: 10,
        secrets: {},
        initial_message: 'hello',
      });
      const settledAs = async (s: string) =>
        until(async () => (await stored(id))?.state === s, `the entry to say ${s}`);
      await settledAs('awaiting_user_input');
      expect(await stored(id)).toEqual(await projected(id));
      await host.passivate(id, 'idle');
      expect(await stored(id)).toEqual(await projected(id));
      await host.commands.act(id, 'ada', { type: 'message', content: 'again' });
      await settledAs('awaiting_user_input');
      expect(await stored(id)).toEqual(await projected(id));
      const { conversation_id: fork } = await host.commands.fork(id, 'ada', await stores.log.lastSeq(id));
      await until(async () => (await stores.conversations.get('ada', fork))?.in_memory === true, 'the fork');
      expect(await stored(fork)).toEqual(await projected(fork));
    } finally {
      await host.shutdown();
    }
  });
});
