import {
  agentStateOf,
  BUSY_AGENT_STATES,
  foldEvents,
  stateAt,
  statePaths,
  type SessionSnapshot,
} from '../machines/index.ts';
import type { LoggedEvent, UserAction } from '../protocol/index.ts';
import { api, ApiError } from './api.ts';
import { BusyNotice } from './busyNotice.ts';
import { chatItem, describe } from './chat.ts';
import { Diagram } from './diagram.ts';
import { fill, h } from './dom.ts';
import { liveSocket } from './liveSocket.ts';
import { ReplyBubble } from './replyBubble.ts';

/**
 * One conversation: the chat live over the WebSocket protocol, the controls,
 * the statechart moving as events arrive, and a timeline to scrub through.
 * Every state shown is a fold of the events the socket delivered, with the
 * same browser-safe module as the server (machines/inspect.ts).
 */
export function openConversation(root: HTMLElement, id: string): void {
  const events: LoggedEvent[] = [];
  let live: SessionSnapshot | undefined;
  let lastTransition: { from: string[]; to: string[] } | null = null;
  /** The seq being looked at, or null: live. */
  let scrubbed: number | null = null;

  const diagram = new Diagram();
  const chat = h('div', { class: 'chat', 'data-testid': 'chat' });
  const reply = new ReplyBubble(chat);
  const timeline = h('ol', { class: 'timeline', 'data-testid': 'timeline' });
  const inspector = h('div', { class: 'inspector', 'data-testid': 'inspector' });
  const badge = h('span', { class: 'badge', 'data-testid': 'agent-state' }, 'loading');
  const connection = h('span', { class: 'connection', 'data-testid': 'connection' }, 'connecting');
  const lineage = h('span', { class: 'lineage', 'data-testid': 'lineage' });
  const errors = h('div', { class: 'errors', 'data-testid': 'errors' });
  const confirm = h('div', { class: 'confirm', 'data-testid': 'confirm', hidden: true });
  const input = h('textarea', {
    'data-testid': 'input',
    rows: 2,
    placeholder: 'A message (start with ! to run a command)',
  });
  const busy = new BusyNotice(input);

  const socket = liveSocket(id, {
    event: (logged) => arrived(logged),
    delta: (frame) => {
      // Only a running agent writes: what a step given up (stopped, paused) streamed is not shown.
      if (live && agentStateOf(live) === 'running') reply.delta(frame);
    },
    status: (message) => chat.insertBefore(h('div', { class: 'line status' }, message), reply.anchor),
    error: (code, message, clientId) =>
      code === 'AGENT_BUSY' ? busy.refused(message, clientId) : showError(`${code}: ${message}`),
    connected: (up) => {
      connection.textContent = up ? 'live' : 'reconnecting';
      connection.dataset.up = String(up);
    },
  });

  const act = (action: UserAction) => socket.send(action);
  const send = (kind: 'message' | 'run') => {
    const text = input.value.trim();
    if (!text) return;
    const clientId = act(kind === 'run' ? { type: 'run', command: text } : { type: 'message', content: text });
    if (kind === 'message') busy.sent(text, clientId);
    input.value = '';
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      send('message');
    }
  });
  const button = (label: string, onclick: () => void, testid: string) =>
    h('button', { type: 'button', 'data-testid': testid, onclick }, label);
  // Enabled only while the agent works (running, rate limited): the one moment an interrupt means something.
  const interrupt = button('Interrupt', () => act({ type: 'interrupt' }), 'interrupt');
  interrupt.disabled = true;

  fill(
    root,
    h(
      'div',
      { class: 'conversation' },
      h(
        'div',
        { class: 'head' },
        h('a', { href: '/' }, '← conversations'),
        h('code', { 'data-testid': 'conversation-id' }, id),
        badge,
        connection,
        lineage,
        button('drop socket', () => socket.drop(), 'drop'),
      ),
      h(
        'div',
        { class: 'columns' },
        h(
          'div',
          { class: 'left' },
          chat,
          confirm,
          h(
            'div',
            { class: 'composer' },
            input,
            button('Send', () => send('message'), 'send'),
            button('Run', () => send('run'), 'run'),
          ),
          busy.element,
          h(
            'div',
            { class: 'controls' },
            interrupt,
            button('Pause', () => act({ type: 'change_agent_state', state: 'paused' }), 'pause'),
            button('Resume', () => act({ type: 'change_agent_state', state: 'running' }), 'resume'),
            button('Stop', () => act({ type: 'change_agent_state', state: 'stopped' }), 'stop'),
            button('Reconnect runtime', () => act({ type: 'reconnect_runtime' }), 'reconnect'),
          ),
          errors,
        ),
        h(
          'div',
          { class: 'right' },
          diagram.element,
          h('div', { class: 'scrubber' }, h('div', {}, h('h3', {}, 'Timeline'), timeline), inspector),
        ),
      ),
    ),
  );

  function showError(text: string): void {
    errors.append(h('div', { class: 'error' }, text));
  }

  function arrived(logged: LoggedEvent): void {
    events.push(logged);
    const wasRunning = live !== undefined && agentStateOf(live) === 'running';
    try {
      const fold = foldEvents([logged.event], live ? { from: live, trace: true } : { trace: true });
      const step = fold.steps[0];
      lastTransition = step ? { from: statePaths(step.from), to: statePaths(step.to) } : lastTransition;
      live = fold.snapshot;
    } catch (err) {
      showError(`the log does not fold here: ${err instanceof Error ? err.message : String(err)}`);
    }
    // The stored answer takes the place of its streamed text; a reply not stored when the agent stops is given up.
    reply.stored(logged.event);
    busy.stored(logged.event);
    if (live) {
      const state = agentStateOf(live);
      if (wasRunning && state !== 'running') reply.stopped();
      interrupt.disabled = !BUSY_AGENT_STATES.has(state);
      busy.agentState(state);
    }
    chat.insertBefore(chatItem(logged), reply.anchor);
    chat.scrollTop = chat.scrollHeight;
    timeline.append(
      h(
        'li',
        {},
        h(
          'button',
          { type: 'button', 'data-seq': logged.seq, onclick: () => scrub(logged.seq) },
          h('span', { class: 'seq' }, logged.seq),
          ` ${logged.event.type}`,
          h('span', { class: 'src' }, ` ${logged.event.source}`),
        ),
      ),
    );
    if (scrubbed === null) showLive();
  }

  function showLive(): void {
    if (!live) return;
    const state = agentStateOf(live);
    badge.textContent = state;
    badge.dataset.state = state;
    diagram.highlight(live.value, lastTransition?.from);
    const forked = live.context.forkedFrom;
    fill(
      lineage,
      forked
        ? h(
            'a',
            { href: `/?conversation=${forked.conversationId}` },
            `fork of ${forked.conversationId.slice(0, 8)} @ ${forked.seq}`,
          )
        : null,
    );
    showConfirmation(live, state);
    fill(inspector, h('div', { class: 'mode', 'data-testid': 'mode' }, 'live'), stateTable(live, lastTransition));
    for (const b of timeline.querySelectorAll('button')) b.classList.remove('chosen');
  }

  function showConfirmation(snapshot: SessionSnapshot, state: string): void {
    const pending = snapshot.context.pendingCommand;
    const waiting = state === 'awaiting_user_confirmation' && pending !== null;
    confirm.hidden = !waiting;
    if (!waiting) return;
    const asked = events.find((l) => l.event.id === pending.eventId)?.event;
    const rated = asked?.type === 'command' || asked?.type === 'tool_call' ? asked.data : undefined;
    const risk = rated?.risk ?? 'unrated';
    const model = rated?.security_risk ?? 'UNKNOWN';
    const what = pending.tool ? `${pending.tool.name} ${JSON.stringify(pending.tool.arguments)}` : pending.command;
    fill(
      confirm,
      h('div', {}, 'The agent asks to run ', h('code', { 'data-testid': 'confirm-command' }, what)),
      h(
        'div',
        { class: 'ratings' },
        h('span', { class: `risk ${risk}`, 'data-testid': 'confirm-risk', title: "the rules' rating" }, `${risk} risk`),
        ' ',
        h(
          'span',
          {
            class: `risk model ${model.toLowerCase()}`,
            'data-testid': 'confirm-model-risk',
            title: "the model's rating",
          },
          `model: ${model}`,
        ),
      ),
      button('Approve', () => act({ type: 'change_agent_state', state: 'user_confirmed' }), 'approve'),
      button('Reject', () => act({ type: 'change_agent_state', state: 'user_rejected' }), 'reject'),
    );
  }

  function scrub(seq: number): void {
    const at = stateAt(events, seq);
    if (!at) return;
    scrubbed = seq;
    const index = events.findIndex((l) => l.seq === seq);
    const before = index > 0 ? stateAt(events, events[index - 1]!.seq)?.context : undefined;
    diagram.highlight(at.value, at.transition?.from);
    badge.textContent = at.state;
    badge.dataset.state = at.state;
    for (const b of timeline.querySelectorAll('button')) b.classList.toggle('chosen', b.dataset.seq === String(seq));
    fill(
      inspector,
      h(
        'div',
        { class: 'mode scrubbed', 'data-testid': 'mode' },
        `at seq ${seq}: ${at.event.type} (${describe(at.event)})`,
        button(
          'Back to live',
          () => {
            scrubbed = null;
            showLive();
          },
          'live',
        ),
        button('Fork here', () => void forkAt(seq), 'fork'),
      ),
      stateTable({ value: at.value, context: at.context, state: at.state }, at.transition),
      h('h4', {}, 'What changed in the context'),
      h('pre', { 'data-testid': 'context-diff' }, contextDiff(before, at.context)),
    );
  }

  async function forkAt(seq: number): Promise<void> {
    try {
      const { conversation_id } = await api<{ conversation_id: string }>('POST', `/api/conversations/${id}/fork`, {
        at_seq: seq,
      });
      socket.close();
      location.assign(`/?conversation=${conversation_id}`);
    } catch (err) {
      showError(err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
    }
  }
}

function stateTable(
  at: { value: unknown; context: object; state?: string } | SessionSnapshot,
  transition: { from: string[]; to: string[] } | null,
): HTMLElement {
  const state = 'state' in at && typeof at.state === 'string' ? at.state : agentStateOf(at as SessionSnapshot);
  return h(
    'div',
    { class: 'state-table' },
    h('div', {}, 'agent state ', h('b', { 'data-testid': 'inspected-state' }, state)),
    h(
      'div',
      {},
      'statechart ',
      h('code', { 'data-testid': 'inspected-value' }, statePaths(at.value as never).join(', ')),
    ),
    h(
      'div',
      {},
      'transition ',
      h(
        'code',
        { 'data-testid': 'inspected-transition' },
        transition ? `${transition.from.join(', ') || '(start)'} → ${transition.to.join(', ')}` : '(none: a fact)',
      ),
    ),
    h(
      'details',
      {},
      h('summary', {}, 'context'),
      h('pre', { 'data-testid': 'inspected-context' }, JSON.stringify(at.context, null, 2)),
    ),
  );
}

/** The context's fields that differ from the event before, as `field: before → after` lines. */
function contextDiff(before: object | undefined, after: object): string {
  const lines: string[] = [];
  const was = (before ?? {}) as Record<string, unknown>;
  for (const [key, value] of Object.entries(after)) {
    const a = JSON.stringify(was[key]);
    const b = JSON.stringify(value);
    if (a !== b) lines.push(`${key}: ${a ?? '(none)'} → ${b}`);
  }
  return lines.length ? lines.join('\n') : '(no change)';
}
