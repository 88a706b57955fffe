import { describe, expect, it } from 'vitest';
import { agentStateOf, foldEvents } from '../../machines/index.ts';
import type { EventOf, StoredEvent } from '../../protocol/index.ts';
import { toAgentAction, toChatMessages, type Agent, type AssistantReply } from '../../src/agent/index.ts';
import type { NodeHost } from '../../src/host/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import {
  memoryConversationStore,
  memoryEventLog,
  memorySnapshotStore,
  type ConversationStore,
  type EventLog,
} from '../../src/store/index.ts';
import { memoryHost } from '../support/memoryHost.ts';
import { until } from '../support/until.ts';

// How a call's ratings decide whether it waits in confirmation mode (src/agent/riskAnalyzer.ts `rateCall`),
// through the whole host: the model's replies are turned into actions as the LLM agent does (`toAgentAction`).

type Spec = { id: string; name: string; args: Record<string, unknown> };

/** A model reply making these calls. */
const calls = (...specs: Spec[]): AssistantReply => ({
  content: null,
  tool_calls: specs.map(({ id, name, args }) => ({ id, function: { name, arguments: JSON.stringify(args) } })),
});
const said = (content: string): AssistantReply => ({ content });

/** An agent that answers each step with the next scripted model reply (a plain message once they run out). */
function modelAgent(replies: AssistantReply[]): Agent {
  return {
    context: () => ({
      observe: () => {},
      step: () => Promise.resolve(toAgentAction(replies.shift() ?? said('Nothing more to do.'))),
    }),
  };
}

interface Stores {
  log: EventLog;
  conversations: ConversationStore;
}

function setup(options: { confirmUnknown?: boolean; replies: AssistantReply[]; stores?: Stores }) {
  const stores = options.stores ?? { log: memoryEventLog(), conversations: memoryConversationStore() };
  const ran: string[] = [];
  const host = memoryHost({
    ...stores,
    // A fresh snapshot store: a host on a log written by another one folds that log.
    snapshots: memorySnapshotStore(),
    runtimes: memoryRuntimeProvider((command) => {
      ran.push(command);
      return { exit_code: 0, output: `ran ${command}\n`, timed_out: false, truncated: false };
    }),
    agentFor: () => modelAgent(options.replies),
    ...(options.confirmUnknown !== undefined && { confirmUnknown: options.confirmUnknown }),
  });
  const events = async (id: string): Promise<StoredEvent[]> => (await stores.log.read(id)).items.map((i) => i.event);
  return { host, stores, ran, events };
}

async function start(host: NodeHost, message: string, confirmationMode = true): Promise<string> {
  const { conversation_id: id } = await host.commands.create('local', {
    confirmation_mode: confirmationMode,
    max_iterations: 100,
    secrets: {},
    initial_message: message,
  });
  return id;
}

const stateOf = async (host: NodeHost, id: string) => (await host.session(id, 'local')).state;

function untilState(host: NodeHost, id: string, state: string): Promise<true> {
  return until(async () => (await stateOf(host, id)) === state, `the agent to be ${state}`);
}

const agentCalls = (events: StoredEvent[]) =>
  events.filter(
    (e): e is EventOf<'command' | 'tool_call'> =>
      e.source === 'agent' && (e.type === 'command' || e.type === 'tool_call'),
  );

const resultOf = (events: StoredEvent[], id: number) =>
  events.find(
    (e): e is EventOf<'tool_result' | 'command_output'> =>
      (e.type === 'tool_result' || e.type === 'command_output') && e.cause === id,
  );

const unrated: Spec = { id: 'call_unrated', name: 'run_command', args: { command: 'echo unrated' } };

describe('rating calls for confirmation mode', () => {
  it('holds an unrated call under TETHER_CONFIRM_UNKNOWN; the log folds to that wait, and a host without it that folds the log still waits, then runs the call once confirmed', async () => {
    const first = setup({ confirmUnknown: true, replies: [calls(unrated)] });
    const id = await start(first.host, 'Run it.');
    await untilState(first.host, id, 'awaiting_user_confirmation');
    const written = await first.events(id);
    expect(agentCalls(written).map((e) => e.data)).toEqual([
      expect.objectContaining({
        command: 'echo unrated',
        call_id: 'call_unrated',
        risk: 'low',
        security_risk: 'UNKNOWN',
        needs_confirmation: true,
      }),
    ]);
    expect(first.ran).toEqual([]);
    // The stored decision is what a fold reads: the log alone says the call waits.
    expect(agentStateOf(foldEvents(written).snapshot)).toBe('awaiting_user_confirmation');
    await first.host.shutdown();

    // Another host, whose node would not hold an unrated call, takes the log over.
    const second = setup({ confirmUnknown: false, replies: [said('It ran.')], stores: first.stores });
    expect(await stateOf(second.host, id)).toBe('awaiting_user_confirmation');
    const back = await second.events(id);
    expect(back.find((e) => e.type === 'session_rehydrated')?.data).toMatchObject({ from: 'log' });
    expect(agentStateOf(foldEvents(back).snapshot)).toBe('awaiting_user_confirmation');
    expect(second.ran).toEqual([]);
    await second.host.commands.act(id, 'local', { type: 'change_agent_state', state: 'user_confirmed' });
    await untilState(second.host, id, 'awaiting_user_input');
    expect(second.ran).toEqual(['echo unrated']);
    const events = await second.events(id);
    expect(resultOf(events, agentCalls(events)[0]!.id)?.data).toMatchObject({
      call_id: 'call_unrated',
      exit_code: 0,
      output: 'ran echo unrated\n',
    });
    await second.host.shutdown();
  });

  it('runs a new unrated call at once when TETHER_CONFIRM_UNKNOWN is off, and still holds what the rules rate high', async () => {
    const floor: Spec = { id: 'call_floor', name: 'run_command', args: { command: 'rm -rf build' } };
    const { host, ran, events } = setup({ confirmUnknown: false, replies: [calls(unrated), calls(floor)] });
    const id = await start(host, 'Run them.');
    await untilState(host, id, 'awaiting_user_confirmation');
    expect(ran).toEqual(['echo unrated']);
    expect(agentCalls(await events(id)).map((e) => e.data)).toEqual([
      expect.objectContaining({
        call_id: 'call_unrated',
        risk: 'low',
        security_risk: 'UNKNOWN',
        needs_confirmation: false,
      }),
      expect.objectContaining({
        call_id: 'call_floor',
        risk: 'high',
        security_risk: 'UNKNOWN',
        needs_confirmation: true,
      }),
    ]);
    await host.shutdown();
  });

  it('never holds finish or ask_user, alone or among other calls', async () => {
    const finishAmong: Spec = { id: 'call_finish_among', name: 'finish', args: { message: 'too early' } };
    const askAmong: Spec = { id: 'call_ask_among', name: 'ask_user', args: { question: 'too early?' } };
    const read: Spec = { id: 'call_read', name: 'read_file', args: { path: 'notes.txt' } };
    const { host, ran, events } = setup({
      confirmUnknown: true,
      replies: [
        calls(finishAmong, askAmong, read),
        calls({ id: 'call_ask', name: 'ask_user', args: { question: 'Which file?' } }),
        calls({ id: 'call_finish', name: 'finish', args: { message: 'Done.' } }),
      ],
    });
    const id = await start(host, 'Work.');
    await untilState(host, id, 'awaiting_user_input');
    let stored = await events(id);
    expect(stored.find((e) => e.type === 'message' && e.source === 'agent')?.data).toMatchObject({
      content: 'Which file?',
      call_id: 'call_ask',
    });
    await host.commands.act(id, 'local', { type: 'message', content: 'notes.txt' });
    await untilState(host, id, 'finished');
    stored = await events(id);
    expect(stored.find((e) => e.type === 'finish')?.data).toMatchObject({ content: 'Done.', call_id: 'call_finish' });
    // Among other calls, finish and ask_user are calls that do not act: never rated, never held, answered at once.
    expect(agentCalls(stored).map((e) => e.data)).toEqual([
      expect.objectContaining({ call_id: 'call_finish_among', tool: 'finish', needs_confirmation: false }),
      expect.objectContaining({ call_id: 'call_ask_among', tool: 'ask_user', needs_confirmation: false }),
      expect.objectContaining({ call_id: 'call_read', tool: 'read_file', needs_confirmation: false }),
    ]);
    expect(agentCalls(stored).every((e) => e.data.security_risk === undefined)).toBe(true);
    for (const call of agentCalls(stored)) expect(resultOf(stored, call.id)?.type).toBe('tool_result');
    expect(stored.some((e) => e.type === 'agent_state_changed' && e.data.state === 'awaiting_user_confirmation')).toBe(
      false,
    );
    expect(ran).toEqual([]);
    await host.shutdown();
  });

  it('stores a result for a rejected call and for every later call of its reply: no call is left unanswered', async () => {
    const risky: Spec = {
      id: 'call_risky',
      name: 'run_command',
      args: { command: 'rm -rf build', security_risk: 'LOW' },
    };
    const later: Spec = {
      id: 'call_later',
      name: 'run_command',
      args: { command: 'echo later', security_risk: 'LOW' },
    };
    const write: Spec = {
      id: 'call_write',
      name: 'write_file',
      args: { path: 'a.txt', content: 'a', security_risk: 'LOW' },
    };
    const { host, ran, events } = setup({ replies: [calls(risky, later, write)] });
    const id = await start(host, 'Clean up.');
    await untilState(host, id, 'awaiting_user_confirmation');
    await host.commands.act(id, 'local', { type: 'change_agent_state', state: 'user_rejected' });
    await untilState(host, id, 'rejected');
    const stored = await events(id);
    const results = agentCalls(stored).map((call) => resultOf(stored, call.id));
    expect(results.map((r) => [r?.type, r?.data.call_id, r?.data.output])).toEqual([
      ['command_output', 'call_risky', 'not run: the user rejected it'],
      ['command_output', 'call_later', 'not run: the user rejected a call before it'],
      ['tool_result', 'call_write', 'not run: the user rejected a call before it'],
    ]);
    expect(ran).toEqual([]);
    // The history the model would be sent holds a result for every call, and no placeholder.
    const messages = toChatMessages(stored);
    const answered = messages.flatMap((m) => (m.role === 'tool' ? [m.tool_call_id] : []));
    expect(answered).toEqual(['call_risky', 'call_later', 'call_write']);
    expect(JSON.stringify(messages)).not.toContain('No result was recorded');
    await host.shutdown();
  });
});
