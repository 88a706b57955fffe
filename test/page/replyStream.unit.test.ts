import { describe, expect, it } from 'vitest';
import type { StoredEvent } from '../../protocol/index.ts';
import { ReplyStream, type ReplyChange } from '../../page/replyStream.ts';
import type { DeltaFrame } from '../../src/client/index.ts';

// The page's provisional reply, fed frames and events directly: what the bubble shows after each.

const delta = (item_id: string, attempt: number, index: number, text: string): DeltaFrame => ({
  type: 'delta',
  item_id,
  attempt,
  index,
  text,
});

let nextId = 10;
const envelope = { v: 1 as const, conversation_id: 'c1', ts: '2025-01-01T00:00:00.000Z' };
const event = (e: Pick<StoredEvent, 'type' | 'source' | 'data'>): StoredEvent =>
  ({ ...envelope, id: nextId++, ...e }) as StoredEvent;
const agentMessage = (item_id: string, content: string, attempt = 1) =>
  event({ type: 'message', source: 'agent', data: { content, item_id, attempt, deltas: 1 } });
const attemptEvent = (item_id: string, attempt: number) =>
  event({ type: 'agent_attempt', source: 'agent', data: { item_id, attempt, reason: 'server_error' } });

/** A stream and the bubble its changes make: its text, or null when there is none. */
function screen() {
  const stream = new ReplyStream();
  const changes: ReplyChange[] = [];
  let bubble: { text: string; attempt: number } | null = null;
  const apply = (change: ReplyChange | null) => {
    if (change === null) return;
    changes.push(change);
    if (change.type === 'clear' || (change.type === 'show' && change.text === '')) bubble = null;
    else if (change.type === 'show') bubble = { text: change.text, attempt: change.attempt };
    else if (bubble) bubble.text += change.text;
    else throw new Error('append without a bubble');
  };
  return {
    changes,
    delta: (...args: Parameters<typeof delta>) => apply(stream.delta(delta(...args))),
    stored: (e: StoredEvent) => apply(stream.stored(e)),
    stopped: () => apply(stream.stopped()),
    get text(): string | null {
      return bubble?.text ?? null;
    },
    get attempt(): number | null {
      return bubble?.attempt ?? null;
    },
  };
}

describe('the reply being written (page/replyStream.ts)', () => {
  it('shows the first delta, then appends each next one to it', () => {
    const s = screen();
    s.delta('7', 1, 0, 'Hello ');
    s.delta('7', 1, 1, 'there, ');
    s.delta('7', 1, 2, 'Ada.');
    expect(s.text).toBe('Hello there, Ada.');
    expect(s.changes.map((c) => c.type)).toEqual(['show', 'append', 'append']);
  });

  it('shows each index once: the attempt sent again from index 0 (a reconnect) adds nothing, a piece after a hole waits for it', () => {
    const s = screen();
    s.delta('7', 1, 0, 'a ');
    s.delta('7', 1, 1, 'b ');
    s.delta('7', 1, 0, 'a ');
    s.delta('7', 1, 1, 'b ');
    expect(s.text).toBe('a b ');
    s.delta('7', 1, 3, 'd ');
    expect(s.text).toBe('a b ');
    s.delta('7', 1, 2, 'c ');
    expect(s.text).toBe('a b c d ');
  });

  it('drops the older attempt’s text when a newer attempt’s delta comes, and ignores the older one’s late deltas', () => {
    const s = screen();
    s.delta('7', 1, 0, 'first ');
    s.delta('7', 1, 1, 'try');
    s.delta('7', 2, 0, 'second ');
    expect(s).toMatchObject({ text: 'second ', attempt: 2 });
    s.delta('7', 1, 2, ' late');
    s.delta('7', 2, 1, 'try');
    expect(s.text).toBe('second try');
  });

  it('drops the older attempt’s text when agent_attempt is stored, before any delta of the new attempt', () => {
    const s = screen();
    s.delta('7', 1, 0, 'cut ');
    s.stored(attemptEvent('7', 2));
    expect(s.text).toBeNull();
    s.delta('7', 1, 1, 'late');
    expect(s.text).toBeNull();
    s.delta('7', 2, 0, 'again');
    expect(s).toMatchObject({ text: 'again', attempt: 2 });
    // The attempt it already shows, stored after its first deltas: nothing changes.
    s.stored(attemptEvent('7', 2));
    expect(s.text).toBe('again');
  });

  it('gives way to the stored event of its item, and shows nothing more of that item (deltas sent again after it)', () => {
    const s = screen();
    s.delta('7', 1, 0, 'Hi ');
    s.stored(event({ type: 'message', source: 'user', data: { content: 'meanwhile' } }));
    s.stored(agentMessage('8', 'another item'));
    expect(s.text).toBe('Hi ');
    s.stored(agentMessage('7', 'Hi there'));
    expect(s.text).toBeNull();
    s.delta('7', 1, 0, 'Hi ');
    s.delta('7', 1, 1, 'there');
    expect(s.text).toBeNull();
  });

  it('ignores deltas of an item already stored before they come (a page loaded after the reply)', () => {
    const s = screen();
    s.stored(agentMessage('7', 'done'));
    s.delta('7', 1, 0, 'done');
    expect(s.text).toBeNull();
    expect(s.changes).toEqual([]);
  });

  it('is given up when the agent stops before the reply is stored; a newer attempt of the step shows again', () => {
    const s = screen();
    s.delta('7', 1, 0, 'half ');
    s.stopped();
    expect(s.text).toBeNull();
    s.delta('7', 1, 1, 'way');
    expect(s.text).toBeNull();
    s.stored(attemptEvent('7', 2));
    s.delta('7', 2, 0, 'whole');
    expect(s).toMatchObject({ text: 'whole', attempt: 2 });
  });

  it('is given up at an interrupt, and the stored interrupted message (what was streamed) ends its item', () => {
    const s = screen();
    s.delta('7', 1, 0, 'Once ');
    s.delta('7', 1, 1, 'upon ');
    // The user's interrupt is stored first: the agent no longer runs.
    s.stored(event({ type: 'interrupt', source: 'user', data: {} }));
    s.stopped();
    expect(s.text).toBeNull();
    const cut = s.changes.length;
    s.stored(
      event({
        type: 'message',
        source: 'agent',
        data: { content: 'Once upon ', item_id: '7', attempt: 1, deltas: 2, interrupted: true },
      }),
    );
    // Deltas the server had sent before it cut the step, and the attempt sent again after a reconnect: nothing.
    s.delta('7', 1, 2, 'a time');
    s.delta('7', 1, 0, 'Once ');
    s.stored(attemptEvent('7', 2));
    s.delta('7', 2, 0, 'Once ');
    expect(s.text).toBeNull();
    // Nothing of the item is shown again.
    expect(s.changes.slice(cut).filter((c) => c.type !== 'clear')).toEqual([]);
  });

  it('writes one reply at a time: another item’s delta replaces it, and the one before shows nothing more', () => {
    const s = screen();
    s.delta('7', 1, 0, 'old ');
    s.delta('9', 1, 0, 'new ');
    expect(s.text).toBe('new ');
    s.delta('7', 1, 1, 'late');
    expect(s.text).toBe('new ');
  });
});
