import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { StoredEvent } from '../../protocol/index.ts';
import { BUSY_TEXT, BusyNotice } from '../../page/busyNotice.ts';
import { fake, useFakeDocument } from './fakeDocument.ts';

// A message refused with AGENT_BUSY (page/busyNotice.ts): the notice, and the text back in the box.

beforeAll(useFakeDocument);
afterAll(() => vi.unstubAllGlobals());

const REFUSAL =
  'the agent is busy (running) and this conversation rejects messages meanwhile (double_texting: reject): wait, or interrupt it first';

let nextId = 1;
const userMessage = (content: string) =>
  ({
    v: 1,
    id: nextId++,
    conversation_id: 'c1',
    ts: '2025-01-01T00:00:00.000Z',
    source: 'user',
    type: 'message',
    data: { content },
  }) as StoredEvent;

/** A notice over its box, and what the page does on Send: the text goes out, the box empties. */
function composer() {
  const input = fake(document.createElement('textarea'));
  const notice = new BusyNotice(input as unknown as HTMLTextAreaElement);
  const send = (text: string) => {
    notice.sent(text);
    input.value = '';
  };
  return { input, notice, element: fake(notice.element), send };
}

describe('the AGENT_BUSY notice (page/busyNotice.ts)', () => {
  it('is hidden until a message is refused, then says the agent is busy and puts the text back in the box', () => {
    const { input, notice, element, send } = composer();
    expect(element.hidden).toBe(true);
    send('are you there?');
    expect(input.value).toBe('');
    notice.refused(REFUSAL);
    expect(element.hidden).toBe(false);
    expect(element.textContent).toBe(BUSY_TEXT);
    expect(element.textContent).toMatch(/busy.*rejects messages while it works.*interrupt/);
    expect(element.title).toBe(REFUSAL);
    expect(input.value).toBe('are you there?');
  });

  it('gives back the text of the message the refusal names by its client_id, not the last one sent', () => {
    const { input, notice } = composer();
    notice.sent('one', 'id-1');
    notice.sent('two', 'id-2');
    input.value = '';
    notice.refused(REFUSAL, 'id-1');
    expect(input.value).toBe('one');
    notice.refused(REFUSAL, 'id-unknown');
    expect(input.value).toBe('one');
  });

  it('puts the refused text in front of what was typed since, and gives each text back once', () => {
    const { input, notice, send } = composer();
    send('first thought');
    input.value = 'second thought';
    notice.refused(REFUSAL);
    expect(input.value).toBe('first thought\nsecond thought');
    // A second refusal with nothing more sent gives nothing back again.
    notice.refused(REFUSAL);
    expect(input.value).toBe('first thought\nsecond thought');
  });

  it('gives back the last message sent whose stored message has not come, not one that was stored', () => {
    const { input, notice, send } = composer();
    send('taken');
    send('refused');
    notice.stored(userMessage('taken'));
    notice.refused(REFUSAL);
    expect(input.value).toBe('refused');
    // Two refused in a row: both come back, in the order they were written.
    const other = composer();
    other.send('one');
    other.send('two');
    other.notice.refused(REFUSAL);
    other.notice.refused(REFUSAL);
    expect(other.input.value).toBe('one\ntwo');
  });

  it('stays while the agent works and goes once it does not', () => {
    const { notice, element, send } = composer();
    send('now?');
    notice.refused(REFUSAL);
    notice.agentState('running');
    notice.agentState('rate_limited');
    expect(element.hidden).toBe(false);
    notice.agentState('awaiting_user_input');
    expect(element.hidden).toBe(true);
  });
});
