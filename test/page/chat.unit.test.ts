import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { chatItem } from '../../page/chat.ts';
import { fake, useFakeDocument } from './fakeDocument.ts';

// The chat's items for stored events (page/chat.ts), rendered on a fake document.

beforeAll(useFakeDocument);
afterAll(() => vi.unstubAllGlobals());

let seq = 1;
const envelope = { v: 1 as const, conversation_id: 'c1', ts: '2025-01-01T00:00:00.000Z' };
const item = (e: Pick<StoredEvent, 'type' | 'source' | 'data'>) => {
  const logged: LoggedEvent = { seq, event: { ...envelope, id: seq - 1, ...e } as StoredEvent };
  seq += 1;
  return fake(chatItem(logged));
};
const output = (extra: object) =>
  item({
    type: 'command_output',
    source: 'environment',
    data: {
      command: 'sleep 60',
      exit_code: null,
      output: 'cancelled: ...',
      timed_out: false,
      truncated: false,
      ...extra,
    },
  });

describe('the chat (page/chat.ts)', () => {
  it('shows an interrupted agent message as its text as streamed, marked interrupted', () => {
    const data = { content: 'Once upon a time, a statechart', item_id: '4', attempt: 1, deltas: 6 };
    const cut = item({ type: 'message', source: 'agent', data: { ...data, interrupted: true } });
    expect(cut.classList.contains('interrupted')).toBe(true);
    expect(cut.getAttribute('data-type')).toBe('message');
    expect(cut.withClass('who').map((who) => who.textContent)).toEqual(['agent · interrupted']);
    expect(cut.textContent).toBe('agent · interruptedOnce upon a time, a statechart');
    // A whole answer is not marked.
    const whole = item({ type: 'message', source: 'agent', data });
    expect(whole.classList.contains('interrupted')).toBe(false);
    expect(whole.textContent).toBe('agentOnce upon a time, a statechart');
  });

  it('shows the user’s interrupt as a line of its own', () => {
    const line = item({ type: 'interrupt', source: 'user', data: {} });
    expect(line.classList.contains('line')).toBe(true);
    expect(line.getAttribute('data-type')).toBe('interrupt');
    expect(line.textContent).toBe('user interrupted the agent');
  });

  it('shows a command the user cancelled as cancelled, by an interrupt or a stop, with its output', () => {
    const interrupted = output({ cancelled: 'interrupt' });
    expect(interrupted.classList.contains('cancelled')).toBe(true);
    expect(interrupted.withClass('exit').map((e) => e.textContent)).toEqual(['cancelled by the user (interrupted)']);
    expect(interrupted.textContent).toContain('cancelled: ...');
    expect(output({ cancelled: 'stop' }).withClass('exit')[0]?.textContent).toBe('cancelled by the user (stopped)');
    // A command cut otherwise (its server died) did not finish, and was not cancelled.
    const died = output({});
    expect(died.classList.contains('cancelled')).toBe(false);
    expect(died.withClass('exit')[0]?.textContent).toBe('did not finish');
  });

  it('says what a message does while the agent works when the conversation does not enqueue it', () => {
    const created = (extra: object) =>
      item({
        type: 'conversation_created',
        source: 'user',
        data: { user: 'ada', confirmation_mode: false, max_iterations: 50, secret_names: [], replay: false, ...extra },
      }).textContent;
    expect(created({ double_texting: 'reject', confirmation_mode: true })).toBe(
      'conversation created (confirmation mode, messages while the agent works: reject)',
    );
    expect(created({ double_texting: 'interrupt' })).toBe(
      'conversation created (messages while the agent works: interrupt)',
    );
    expect(created({ double_texting: 'enqueue' })).toBe('conversation created');
    expect(created({})).toBe('conversation created');
  });
});
