import type { Page } from 'playwright-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ConversationState, DoubleTexting, LoggedEvent } from '../../protocol/index.ts';
import { offMachine, openBrowser, type PageSession } from '../support/browser.ts';
import { useE2e } from '../support/e2e.ts';
import { http, type ServerProcess } from '../support/serverProcess.ts';

// The page against a real server (its own nats-server), in Debian's Chromium.
const TOKEN = 'page-test-token';
const AGENT_DELAY_MS = 700;
/** The streaming server's agent: a reply a few words per delta, this far apart. */
const DELTA_MS = 40;
const UI_MS = 15_000;

const e2e = useE2e();
let server: ServerProcess;
/** A second server whose scripted agent streams its replies (TETHER_AGENT_DELTA_MS). */
let streaming: ServerProcess;
let browser: PageSession;
let page: Page;

beforeAll(async () => {
  [server, streaming, browser] = await Promise.all([
    e2e.start({ env: { TETHER_TOKENS: `${TOKEN}:ada`, TETHER_AGENT_DELAY_MS: String(AGENT_DELAY_MS) } }),
    e2e.start({
      env: { TETHER_TOKENS: `${TOKEN}:ada`, TETHER_AGENT_DELAY_MS: '100', TETHER_AGENT_DELTA_MS: String(DELTA_MS) },
    }),
    openBrowser().then((opened) => {
      e2e.onCleanup(() => opened.close());
      return opened;
    }),
  ]);
  page = browser.page;
}, 60_000);

/** What the page may log as an error: the 401s before a token is given, reconnects while offline. */
const EXPECTED_ERRORS = /status of 401|WebSocket connection to .* net::ERR_INTERNET_DISCONNECTED/;

afterEach(() => {
  // Nothing the page asked for left the machine, and it logged no other error.
  const requests = browser.requests.splice(0);
  const errors = browser.pageErrors.splice(0);
  expect(offMachine(requests)).toEqual([]);
  expect(requests.length).toBeGreaterThan(0);
  expect(errors.filter((e) => !EXPECTED_ERRORS.test(e))).toEqual([]);
});

const byTest = (id: string) => page.getByTestId(id);
async function api<T>(method: string, path: string, body?: unknown, on = server): Promise<T> {
  const res = await http<T>(on.baseUrl, method, path, body, TOKEN);
  if (res.status >= 300) throw new Error(`${method} ${path} answered ${res.status}: ${res.text}`);
  return res.body;
}

/** The conversation the page shows (from its URL). */
const shownId = () => new URL(page.url()).searchParams.get('conversation')!;

/** The statechart's highlighted leaf states. */
const leaves = () =>
  page.locator('.diagram .state.leaf').evaluateAll((els) => els.map((e) => e.getAttribute('data-state')));

async function newConversation(
  options: { confirmation?: boolean; doubleTexting?: DoubleTexting; on?: ServerProcess } = {},
): Promise<string> {
  await page.goto(`${(options.on ?? server).baseUrl}/?token=${TOKEN}`);
  if (options.confirmation) await byTest('confirmation-mode').check();
  if (options.doubleTexting) await byTest('double-texting').selectOption(options.doubleTexting);
  await byTest('new-conversation').click();
  await page.waitForURL(/conversation=/);
  await expect.poll(() => byTest('agent-state').textContent(), { timeout: UI_MS }).toBe('awaiting_user_input');
  return shownId();
}

/** The user messages the chat shows. */
const userMessages = () => page.locator('.chat .msg.user').allTextContents();

async function say(text: string): Promise<void> {
  await byTest('input').fill(text);
  await byTest('send').click();
}

describe('the page', () => {
  it('asks for the token, then lists the user’s conversations and starts one', async () => {
    await page.goto(`${server.baseUrl}/`);
    await page.evaluate(() => localStorage.clear());
    await page.reload();
    await expect.poll(() => byTest('errors').textContent(), { timeout: UI_MS }).toMatch(/token is required/);
    // A token given in the address is kept and taken out of it.
    await page.goto(`${server.baseUrl}/?token=${TOKEN}`);
    // Loaded with it: an item or "No conversation yet", no error.
    await expect.poll(() => byTest('conversations').locator('li').count(), { timeout: UI_MS }).toBeGreaterThan(0);
    expect(await byTest('errors').textContent()).toBe('');
    expect(new URL(page.url()).searchParams.has('token')).toBe(false);
    await page.evaluate(() => localStorage.clear());
    await page.reload();
    await expect.poll(() => byTest('errors').textContent(), { timeout: UI_MS }).toMatch(/token is required/);
    // The field shows when the server asks for a token.
    expect(await page.locator('#token').isVisible()).toBe(true);
    await page.locator('#token').fill(TOKEN);
    // The token is kept, and the page reloads with it.
    await Promise.all([page.waitForEvent('load'), page.locator('#token').dispatchEvent('change')]);
    await byTest('new-conversation').click();
    await page.waitForURL(/conversation=/);
    const id = shownId();
    await expect.poll(() => byTest('agent-state').textContent(), { timeout: UI_MS }).toBe('awaiting_user_input');
    await page.goto(`${server.baseUrl}/`);
    await expect.poll(() => page.locator(`[data-id="${id}"]`).count(), { timeout: UI_MS }).toBe(1);
    expect(await api<{ user: string }>('GET', `/api/conversations/${id}`)).toMatchObject({ user: 'ada' });
  });

  it('sends a message, shows the reply, and the highlighted state goes to running and back', async () => {
    const id = await newConversation();
    await say('hello there');
    await expect.poll(leaves, { timeout: UI_MS }).toEqual(['active.running.thinking']);
    expect(await byTest('agent-state').textContent()).toBe('running');
    await expect
      .poll(() => page.locator('.chat .msg.agent').last().textContent(), { timeout: UI_MS })
      .toContain('hello there');
    await expect.poll(leaves, { timeout: UI_MS }).toEqual(['active.awaiting_user_input']);
    expect(await byTest('agent-state').textContent()).toBe('awaiting_user_input');
    // The chat holds each stored event once, as the log has them.
    const stored = (await api<{ items: LoggedEvent[] }>('GET', `/api/conversations/${id}/events?limit=1000`)).items;
    const shown = await page
      .locator('.chat [data-seq]')
      .evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))));
    expect(shown).toEqual(stored.map((l) => l.seq));
  });

  it('scrubs to an earlier event and shows the state there, as the server folds it; forks there and opens the fork', async () => {
    const parent = await newConversation();
    await say('first');
    await expect.poll(() => page.locator('.chat .msg.agent').count(), { timeout: UI_MS }).toBe(1);
    await say('second');
    await expect.poll(() => page.locator('.chat .msg.agent').count(), { timeout: UI_MS }).toBe(2);
    await expect.poll(leaves, { timeout: UI_MS }).toEqual(['active.awaiting_user_input']);
    const events = (await api<{ items: LoggedEvent[] }>('GET', `/api/conversations/${parent}/events?limit=1000`)).items;
    // The user's first message: the agent starts thinking.
    const first = events.find((l) => l.event.type === 'message' && l.event.source === 'user')!;
    await page.locator(`.timeline button[data-seq="${first.seq}"]`).click();
    const server = await api<ConversationState>('GET', `/api/conversations/${parent}/state?at_seq=${first.seq}`);
    expect(server).toMatchObject({ state: 'running', transition: { to: ['active.running.thinking'] } });
    expect(await byTest('inspected-state').textContent()).toBe(server.state);
    expect(await byTest('inspected-transition').textContent()).toBe(
      `${server.transition!.from.join(', ')} → ${server.transition!.to.join(', ')}`,
    );
    expect(await leaves()).toEqual(['active.running.thinking']);
    expect(JSON.parse((await byTest('inspected-context').textContent())!)).toEqual(server.context);
    expect(await byTest('context-diff').textContent()).toContain('stepCause');
    // Back to live, then to the same point again, and fork there.
    await byTest('live').click();
    await expect.poll(leaves).toEqual(['active.awaiting_user_input']);
    await page.locator(`.timeline button[data-seq="${first.seq}"]`).click();
    await byTest('fork').click();
    await page.waitForURL((url) => url.searchParams.get('conversation') !== parent);
    const fork = shownId();
    await expect.poll(() => byTest('lineage').textContent(), { timeout: UI_MS }).toContain(parent.slice(0, 8));
    // The fork's history: the parent's through the cut, then where it came from; its step is asked again.
    await expect
      .poll(() => page.locator('.chat [data-type="conversation_forked"]').count(), { timeout: UI_MS })
      .toBe(1);
    expect(await page.locator('.chat .msg.user').allTextContents()).toEqual([expect.stringContaining('first')]);
    await expect.poll(() => page.locator('.chat .msg.agent').count(), { timeout: UI_MS }).toBe(1);
    const info = await api<{ forked_from: unknown }>('GET', `/api/conversations/${fork}`);
    expect(info.forked_from).toEqual({ conversation_id: parent, seq: first.seq });
  });

  it("shows a risky command waiting for confirmation, with both ratings (the rules' and the model's), and runs it once approved", async () => {
    await newConversation({ confirmation: true });
    await say('!rm -rf build');
    await expect.poll(() => byTest('agent-state').textContent(), { timeout: UI_MS }).toBe('awaiting_user_confirmation');
    expect(await byTest('confirm').isVisible()).toBe(true);
    expect(await byTest('confirm-command').textContent()).toBe('rm -rf build');
    expect(await byTest('confirm-risk').textContent()).toBe('high risk');
    // The scripted agent rates its commands LOW: the rules' floor is what holds it.
    expect(await byTest('confirm-model-risk').textContent()).toBe('model: LOW');
    expect(await leaves()).toEqual(['active.awaiting_user_confirmation']);
    await byTest('approve').click();
    await expect.poll(() => page.locator('.chat .output').count(), { timeout: UI_MS }).toBe(1);
    await expect.poll(() => byTest('confirm').isVisible()).toBe(false);
    await expect.poll(() => byTest('agent-state').textContent(), { timeout: UI_MS }).toBe('awaiting_user_input');
  });

  it('catches up after its socket drops: what was stored meanwhile appears once, in order', async () => {
    const id = await newConversation();
    await browser.context.setOffline(true);
    await byTest('drop').click();
    await expect.poll(() => byTest('connection').textContent()).toBe('reconnecting');
    // Stored while the page is away.
    await api('POST', `/api/conversations/${id}/actions`, { action: { type: 'message', content: 'while away' } });
    const stored = async () =>
      (await api<{ items: LoggedEvent[] }>('GET', `/api/conversations/${id}/events?limit=1000`)).items;
    await expect
      .poll(async () => (await stored()).some((l) => l.event.source === 'agent'), { timeout: UI_MS })
      .toBe(true);
    expect(await page.locator('.chat .msg').count()).toBe(0);
    expect(await byTest('connection').textContent()).toBe('reconnecting');
    // Sent while away: kept, and sent once the socket is up again.
    await say('typed while away');
    await browser.context.setOffline(false);
    await expect.poll(() => byTest('connection').textContent(), { timeout: UI_MS }).toBe('live');
    await expect
      .poll(userMessages, { timeout: UI_MS })
      .toEqual([expect.stringContaining('while away'), expect.stringContaining('typed while away')]);
    await expect.poll(() => page.locator('.chat .msg.agent').count(), { timeout: UI_MS }).toBe(2);
    await expect.poll(leaves, { timeout: UI_MS }).toEqual(['active.awaiting_user_input']);
    const shown = await page
      .locator('.chat [data-seq]')
      .evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))));
    expect(shown).toEqual((await stored()).map((l) => l.seq));
  });
});

describe('the page, with the agent streaming its replies', () => {
  it('shows the reply growing in a bubble marked as being written, then the stored message in its place', async () => {
    const id = await newConversation({ on: streaming });
    // Every change of the chat, as the page makes it: the bubble's text and the stored agent messages then.
    await page.evaluate(() => {
      const chat = document.querySelector('[data-testid="chat"]')!;
      const bubbles = new Set<Element>();
      const seen: Array<{ text: string | null; stored: number; bubbles: number }> = [];
      Object.assign(window, { seen });
      new MutationObserver(() => {
        const bubble = chat.querySelector('.msg.agent.streaming');
        if (bubble) bubbles.add(bubble);
        const text = bubble
          ? [...bubble.childNodes]
              .filter((n) => n.nodeType === Node.TEXT_NODE)
              .map((n) => n.textContent)
              .join('')
          : null;
        seen.push({ text, stored: chat.querySelectorAll('.msg.agent:not(.streaming)').length, bubbles: bubbles.size });
      }).observe(chat, { childList: true, subtree: true, characterData: true });
    });
    await say('tell me a story about a statechart that learned to stream its words one by one');
    await expect.poll(() => page.locator('.chat .msg.agent').count(), { timeout: UI_MS }).toBe(1);
    await expect.poll(() => page.locator('.chat .msg.agent.streaming').count(), { timeout: UI_MS }).toBe(0);
    await expect.poll(leaves, { timeout: UI_MS }).toEqual(['active.awaiting_user_input']);

    const stored = (
      await api<{ items: LoggedEvent[] }>('GET', `/api/conversations/${id}/events?limit=1000`, undefined, streaming)
    ).items;
    const answer = stored.find((l) => l.event.source === 'agent' && l.event.type === 'message')!.event;
    if (answer.type !== 'message') throw new Error('no agent message stored');
    const content = answer.data.content;
    expect(answer.data.deltas).toBeGreaterThan(3);
    const seen = await page.evaluate(
      () => (window as unknown as { seen: Array<{ text: string | null; stored: number; bubbles: number }> }).seen,
    );
    // (a) Before the stored message: the bubble, growing, its text always the start of the reply.
    const partial = seen.filter((s) => s.text !== null).map((s) => s.text!);
    expect(seen.filter((s) => s.text !== null).every((s) => s.stored === 0)).toBe(true);
    expect(new Set(partial).size).toBeGreaterThan(2);
    expect(partial.every((text, i) => content.startsWith(text) && text.startsWith(partial[i - 1] ?? ''))).toBe(true);
    expect(partial.some((text) => text.length > 0 && text.length < content.length)).toBe(true);
    // One bubble, its text appended to, not made again per delta.
    expect(seen.at(-1)!.bubbles).toBe(1);
    // (b) After it: exactly one agent message, the full text, and no bubble.
    expect(seen.at(-1)).toMatchObject({ text: null, stored: 1 });
    expect(await page.locator('.chat .msg.agent').allTextContents()).toEqual([`agent${content}`]);
    // Deltas are not events: the chat's items and the timeline are the stored events, nothing more.
    const seqs = stored.map((l) => l.seq);
    expect(
      await page.locator('.chat [data-seq]').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq')))),
    ).toEqual(seqs);
    expect(await page.locator('.timeline button').count()).toBe(seqs.length);
  });

  it('interrupts the agent as it writes: the stored message keeps what was streamed, marked interrupted', async () => {
    const id = await newConversation({ on: streaming });
    expect(await byTest('interrupt').isDisabled()).toBe(true);
    await say(`interrupt me ${'word '.repeat(36)}`);
    await page.locator('.chat .msg.agent.streaming').waitFor({ timeout: UI_MS });
    await byTest('interrupt').click();
    await expect.poll(() => page.locator('.chat .msg.agent.interrupted').count(), { timeout: UI_MS }).toBe(1);
    await expect.poll(() => byTest('agent-state').textContent(), { timeout: UI_MS }).toBe('awaiting_user_input');

    const stored = (
      await api<{ items: LoggedEvent[] }>('GET', `/api/conversations/${id}/events?limit=1000`, undefined, streaming)
    ).items;
    const cut = stored.find((l) => l.event.type === 'message' && l.event.source === 'agent')!.event;
    if (cut.type !== 'message') throw new Error('no agent message stored');
    expect(cut.data).toMatchObject({ interrupted: true, content: expect.stringMatching(/^You said: "interrupt me/) });
    // Cut before its end: the whole answer goes on to say how to run a command.
    expect(cut.data.content).not.toMatch(/run action\.$/);
    expect(await page.locator('.chat .msg.agent').allTextContents()).toEqual([
      `agent · interrupted${cut.data.content}`,
    ]);
    expect(await page.locator('.chat [data-type="interrupt"]').allTextContents()).toEqual([
      'user interrupted the agent',
    ]);
    expect(await page.locator('.chat .msg.agent.streaming').count()).toBe(0);
    expect(await byTest('interrupt').isDisabled()).toBe(true);
    expect(await byTest('errors').textContent()).toBe('');
    expect(
      await page.locator('.chat [data-seq]').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq')))),
    ).toEqual(stored.map((l) => l.seq));
  });

  it('in a conversation that rejects messages while the agent works, says the agent is busy and keeps the text', async () => {
    const id = await newConversation({ on: streaming, doubleTexting: 'reject' });
    expect(await page.locator('.chat [data-type="conversation_created"]').textContent()).toContain(
      'messages while the agent works: reject',
    );
    await say(`a long one ${'word '.repeat(36)}`);
    await page.locator('.chat .msg.agent.streaming').waitFor({ timeout: UI_MS });
    await say('and one more thing');
    await expect.poll(() => byTest('busy').isVisible(), { timeout: UI_MS }).toBe(true);
    expect(await byTest('busy').textContent()).toMatch(/agent is busy.*rejects messages while it works/);
    expect(await byTest('input').inputValue()).toBe('and one more thing');
    // Once the agent has answered, the notice goes; nothing of the refused message was stored.
    await expect.poll(() => byTest('busy').isVisible(), { timeout: UI_MS }).toBe(false);
    const stored = (
      await api<{ items: LoggedEvent[] }>('GET', `/api/conversations/${id}/events?limit=1000`, undefined, streaming)
    ).items;
    expect(stored[0]!.event).toMatchObject({ type: 'conversation_created', data: { double_texting: 'reject' } });
    expect(await userMessages()).toEqual([expect.stringContaining('a long one')]);
    expect(stored.filter((l) => l.event.type === 'message' && l.event.source === 'user')).toHaveLength(1);
    expect(await byTest('errors').textContent()).toBe('');
  });
});
