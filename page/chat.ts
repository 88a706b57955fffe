import type { EventOf, LoggedEvent, StoredEvent } from '../protocol/index.ts';
import { h } from './dom.ts';

/** One stored event as a line of the chat: messages as bubbles, commands and their output, the rest as status lines. */
export function chatItem({ seq, event }: LoggedEvent): HTMLElement {
  const base = { 'data-seq': seq, 'data-type': event.type, 'data-source': event.source };
  switch (event.type) {
    case 'message': {
      // An answer the user cut: what had streamed by then, marked as such.
      const cut = event.data.interrupted === true;
      return h(
        'div',
        {
          ...base,
          class: `msg ${event.source}${cut ? ' interrupted' : ''}`,
          title: cut ? 'The user interrupted this step: its text as streamed by then.' : null,
        },
        h('span', { class: 'who' }, cut ? `${event.source} · interrupted` : event.source),
        event.data.content,
      );
    }
    case 'command':
      return h(
        'div',
        { ...base, class: `cmd ${event.source}` },
        thought(event.data.thought),
        h('code', {}, `$ ${event.data.command}`),
        ...ratings(event.data),
      );
    case 'tool_call':
      return h(
        'div',
        { ...base, class: 'cmd agent tool' },
        thought(event.data.thought),
        h('code', {}, `${event.data.tool} ${JSON.stringify(event.data.arguments)}`),
        ...ratings(event.data),
      );
    case 'tool_result':
      return h(
        'div',
        { ...base, class: event.data.is_error ? 'output error' : 'output' },
        h('div', { class: 'exit' }, event.data.is_error ? `${event.data.tool}: error` : event.data.tool),
        h('pre', {}, event.data.output),
      );
    case 'command_output':
      return h(
        'div',
        { ...base, class: event.data.cancelled ? 'output cancelled' : 'output' },
        h('div', { class: 'exit' }, exitLine(event.data)),
        h('pre', {}, event.data.output),
      );
    case 'finish':
      return h(
        'div',
        { ...base, class: 'msg agent finish' },
        h('span', { class: 'who' }, 'finished'),
        thought(event.data.thought),
        event.data.content,
      );
    default:
      return h('div', { ...base, class: 'line' }, describe(event));
  }
}

/** How a command ended, in a few words. */
function exitLine({ exit_code, cancelled }: EventOf<'command_output'>['data']): string {
  if (cancelled) return `cancelled by the user (${cancelled === 'interrupt' ? 'interrupted' : 'stopped'})`;
  return exit_code === null ? 'did not finish' : `exit ${exit_code}`;
}

/** A call's two ratings: the rules' (`risk`) and the model's (`security_risk`), as stored with it. */
function ratings(data: { risk?: string; security_risk?: string }): Array<HTMLElement | null> {
  return [
    data.risk ? h('span', { class: `risk ${data.risk}`, title: "the rules' rating" }, `${data.risk} risk`) : null,
    data.security_risk
      ? h('span', { class: 'risk model', title: "the model's rating" }, `model: ${data.security_risk}`)
      : null,
  ];
}

/** The text the agent streamed with a tool call, kept with the call once stored. */
function thought(text: string | undefined): HTMLElement | null {
  return text ? h('div', { class: 'thought' }, text) : null;
}

/** An event that is not a message or a command, in a few words. */
export function describe(event: StoredEvent): string {
  switch (event.type) {
    case 'conversation_created': {
      const { confirmation_mode, double_texting } = event.data;
      const notes = [
        confirmation_mode && 'confirmation mode',
        double_texting && double_texting !== 'enqueue' && `messages while the agent works: ${double_texting}`,
      ].filter(Boolean);
      return `conversation created${notes.length ? ` (${notes.join(', ')})` : ''}`;
    }
    case 'agent_state_changed':
      return `agent ${event.data.state}${event.data.reason ? `: ${event.data.reason}` : ''}`;
    case 'runtime_status':
      return `runtime ${event.data.status}${event.data.message ? `: ${event.data.message}` : ''}`;
    case 'change_agent_state':
      return `user asked for ${event.data.state}`;
    case 'reconnect_runtime':
      return 'user asked for a new runtime';
    case 'interrupt':
      return 'user interrupted the agent';
    case 'agent_error':
      return `agent error ${event.data.code}: ${event.data.message}`;
    case 'agent_attempt': {
      const { attempt, reason, message } = event.data;
      return `agent tries the step again (attempt ${attempt}: ${reason}${message ? `, ${message}` : ''})`;
    }
    case 'agent_usage':
      return `LLM call: ${event.data.prompt_tokens} + ${event.data.completion_tokens} tokens`;
    case 'timeout':
      return event.data.message;
    case 'session_passivated':
      return `left memory (${event.data.reason})`;
    case 'session_rehydrated':
      return `back in memory (from ${event.data.from})`;
    case 'machine_upgraded':
      return `machine upgraded ${event.data.from} → ${event.data.to}`;
    case 'conversation_forked':
      return `forked from ${event.data.conversation_id.slice(0, 8)} at seq ${event.data.seq}`;
    case 'session_closed':
      return `closed: ${event.data.reason}`;
    case 'repository_cloned':
      return `cloned ${event.data.url} (${event.data.branch} at ${event.data.commit.slice(0, 12)})`;
    case 'repository_clone_failed':
      return `could not clone ${event.data.url}: ${event.data.message}`;
    case 'instructions_loaded': {
      const files = event.data.files.map((f) => f.path + (f.truncated ? ' (cut)' : ''));
      return `instructions read from ${files.length ? files.join(', ') : 'no file of the repository'}`;
    }
    case 'tools_listed': {
      const tools = event.data.servers.map((s) => `${s.name} (${s.tools.length})`);
      return `MCP tools listed: ${tools.length ? tools.join(', ') : 'none'}`;
    }
    case 'message':
    case 'command':
    case 'command_output':
    case 'tool_call':
    case 'tool_result':
    case 'finish':
      return event.type;
  }
}
