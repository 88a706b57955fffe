import type { DoubleTexting } from '../protocol/index.ts';
import { api, ApiError, currentToken, listConversations, setToken } from './api.ts';
import { openConversation } from './conversationView.ts';
import { fill, h } from './dom.ts';

/** The choices of `double_texting`, the default first. */
const DOUBLE_TEXTING: readonly DoubleTexting[] = ['enqueue', 'interrupt', 'reject'];

const app = document.getElementById('app')!;
const tokenField = document.getElementById('token') as HTMLInputElement;
tokenField.value = currentToken();
/** The token field: shown once a token is in use, or when the server asks for one. */
const showTokenField = () => (tokenField.parentElement!.hidden = false);
if (tokenField.value) showTokenField();
tokenField.addEventListener('change', () => {
  setToken(tokenField.value.trim());
  location.reload();
});

const conversation = new URLSearchParams(location.search).get('conversation');
if (conversation) openConversation(app, conversation);
else void showList();

/** The user's conversations, newest first, and a button to start one. */
async function showList(): Promise<void> {
  const confirmation = h('input', { type: 'checkbox', 'data-testid': 'confirmation-mode' });
  // What a message does while the agent works: `double_texting`, enqueue when not given.
  const doubleTexting = h(
    'select',
    { 'data-testid': 'double-texting' },
    ...DOUBLE_TEXTING.map((mode) => h('option', { value: mode }, mode)),
  );
  const start = h('button', { type: 'button', 'data-testid': 'new-conversation' }, 'New conversation');
  start.addEventListener('click', () => {
    const mode = doubleTexting.value as DoubleTexting;
    void api<{ conversation_id: string }>('POST', '/api/conversations', {
      confirmation_mode: confirmation.checked,
      ...(mode !== 'enqueue' && { double_texting: mode }),
    })
      .then(({ conversation_id }) => location.assign(`/?conversation=${conversation_id}`))
      .catch((err: unknown) => fill(message, errorText(err)));
  });
  const message = h('div', { class: 'errors', 'data-testid': 'errors' });
  const list = h('ul', { class: 'list', 'data-testid': 'conversations' });
  fill(
    app,
    h(
      'div',
      { class: 'home' },
      h('h2', {}, 'Conversations'),
      h(
        'div',
        { class: 'new' },
        start,
        h('label', {}, confirmation, ' confirmation mode'),
        h('label', {}, 'messages while the agent works ', doubleTexting),
      ),
      message,
      list,
    ),
  );
  try {
    const page = await listConversations();
    if (page.items.length === 0) list.append(h('li', { class: 'empty' }, 'No conversation yet.'));
    for (const item of page.items) {
      list.append(
        h(
          'li',
          {},
          h(
            'a',
            { href: `/?conversation=${item.conversation_id}`, 'data-id': item.conversation_id },
            item.conversation_id,
          ),
          h('span', { class: 'badge', 'data-state': item.state }, item.state),
          h('span', { class: 'meta' }, `${item.created_at} · ${item.last_seq ? `seq ${item.last_seq}` : ''}`),
        ),
      );
    }
  } catch (err) {
    fill(message, errorText(err));
    if (err instanceof ApiError && err.status === 401) {
      showTokenField();
      tokenField.focus();
    }
  }
}

function errorText(err: unknown): string {
  if (err instanceof ApiError && err.status === 401) return 'A token is required: enter it above.';
  return err instanceof ApiError ? `${err.code}: ${err.message}` : String(err);
}
