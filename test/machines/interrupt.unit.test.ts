import { describe, expect, it } from 'vitest';
import { agentStateOf, effectsOf, foldEvents, type DecisionInput, type Streamed } from '../../machines/index.ts';
import type { AgentState, DoubleTexting, StoredEvent } from '../../protocol/index.ts';
import { DecidedConversation } from './deciderConversation.ts';
import { logViolations } from '../properties/logChecks.ts';

/*
 * Interrupt, pause, stop and messages while the agent works (issue 24), as a
 * table: a state, a user action, and what the decider stores (type, then the
 * data that matters), or the code it refuses with. Pure: no I/O.
 */

/** A conversation with its double-texting policy and confirmation mode (3 attempts per step). */
class Conversation extends DecidedConversation {
  constructor(doubleTexting?: DoubleTexting, confirmationMode = false) {
    super({
      confirmation_mode: confirmationMode,
      max_attempts: 3,
      ...(doubleTexting && { double_texting: doubleTexting }),
    });
  }

  get step(): number {
    return this.snapshot.context.stepCause!;
  }
}

type Setup = (c: Conversation) => void;

const connected: Setup = (c) => void c.decide({ type: 'runtime_progress', status: 'connected' });
const thinking: Setup = (c) => {
  connected(c);
  c.decide({ type: 'user_action', action: { type: 'message', content: 'hello' } });
};
const executingAgents: Setup = (c) => {
  thinking(c);
  c.decide({ type: 'agent_answered', cause: c.step, answer: { type: 'run', command: 'sleep 60', risk: 'low' } });
};
const executingUsers: Setup = (c) => {
  connected(c);
  c.decide({ type: 'user_action', action: { type: 'run', command: 'sleep 60' } });
};
const rateLimited: Setup = (c) => {
  thinking(c);
  const retryAt = new Date(Date.UTC(2026, 0, 2)).toISOString();
  c.decide({ type: 'agent_failed', cause: c.step, code: 'LLM_RATE_LIMITED', message: 'slow down', retryAt });
};
const awaiting: Setup = (c) => {
  thinking(c);
  c.decide({ type: 'agent_answered', cause: c.step, answer: { type: 'message', content: 'hi' } });
};
const stopped: Setup = (c) => {
  awaiting(c);
  c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'stopped' } });
};
const paused: Setup = (c) => {
  rateLimited(c);
  c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'paused' } });
};
const finished: Setup = (c) => {
  thinking(c);
  c.decide({ type: 'agent_answered', cause: c.step, answer: { type: 'finish', content: 'done' } });
};
const failed: Setup = (c) => {
  thinking(c);
  c.decide({ type: 'agent_failed', cause: c.step, code: 'AGENT_FAILED', message: 'boom' });
};
const confirming: Setup = (c) => {
  thinking(c);
  c.decide({ type: 'agent_answered', cause: c.step, answer: { type: 'run', command: 'rm -rf b', risk: 'high' } });
};

/** What the step streamed so far, as the session hands it over with the action. */
const streamedOf = (c: Conversation, text: string): Streamed => ({
  itemId: String(c.snapshot.context.stepCause),
  attempt: c.snapshot.context.attempt,
  text,
  deltas: text.length,
});

const interrupt = { type: 'interrupt' } as const;
const stop = { type: 'change_agent_state', state: 'stopped' } as const;
const pause = { type: 'change_agent_state', state: 'paused' } as const;
const message = { type: 'message', content: 'and now this' } as const;

/** A stored event in the table's words: its type and the data that matters for the row. */
function brief(event: StoredEvent): string {
  switch (event.type) {
    case 'agent_state_changed':
      return `state ${event.data.state}`;
    case 'message':
      return `${event.source} message ${JSON.stringify(event.data.content)}${event.data.interrupted ? ' interrupted' : ''}`;
    case 'command_output':
      return `output ${event.data.cancelled ? `cancelled by ${event.data.cancelled}` : `exit ${event.data.exit_code}`}`;
    case 'change_agent_state':
      return `asks ${event.data.state}`;
    default:
      return event.type;
  }
}

interface Row {
  name: string;
  setup: Setup;
  doubleTexting?: DoubleTexting;
  confirmationMode?: true;
  action: DecisionInput extends infer I ? (I extends { type: 'user_action'; action: infer A } ? A : never) : never;
  /** Text streamed by the current attempt when the action comes. */
  streamed?: string;
  stores?: string[];
  refuses?: 'ILLEGAL_TRANSITION' | 'AGENT_BUSY';
  /** The agent state after, when something is stored. */
  then?: AgentState;
}

const TABLE: Row[] = [
  // Interrupt: legal while running or rate limited.
  {
    name: 'thinking, part of a reply streamed',
    setup: thinking,
    action: interrupt,
    streamed: 'Let me lo',
    stores: ['interrupt', 'agent message "Let me lo" interrupted', 'state awaiting_user_input'],
    then: 'awaiting_user_input',
  },
  {
    name: 'thinking, nothing streamed',
    setup: thinking,
    action: interrupt,
    stores: ['interrupt', 'state awaiting_user_input'],
    then: 'awaiting_user_input',
  },
  {
    name: "running the agent's command",
    setup: executingAgents,
    action: interrupt,
    stores: ['interrupt', 'output cancelled by interrupt', 'state awaiting_user_input'],
    then: 'awaiting_user_input',
  },
  {
    name: "running the user's command",
    setup: executingUsers,
    action: interrupt,
    stores: ['interrupt', 'output cancelled by interrupt', 'state awaiting_user_input'],
    then: 'awaiting_user_input',
  },
  {
    name: 'rate limited',
    setup: rateLimited,
    action: interrupt,
    stores: ['interrupt', 'state awaiting_user_input'],
    then: 'awaiting_user_input',
  },
  ...(
    [
      ['loading', () => undefined],
      ['awaiting_user_input', awaiting],
      ['paused', paused],
      ['stopped', stopped],
      ['finished', finished],
      ['error', failed],
    ] as const
  ).map(([name, setup]): Row => ({ name, setup, action: interrupt, refuses: 'ILLEGAL_TRANSITION' })),
  {
    name: 'awaiting_user_confirmation',
    setup: confirming,
    confirmationMode: true,
    action: interrupt,
    refuses: 'ILLEGAL_TRANSITION',
  },
  // Stop: aborts like an interrupt, then stops.
  {
    name: 'thinking, part of a reply streamed',
    setup: thinking,
    action: stop,
    streamed: 'Let me lo',
    stores: ['asks stopped', 'agent message "Let me lo" interrupted', 'state stopped'],
    then: 'stopped',
  },
  {
    name: "running the agent's command",
    setup: executingAgents,
    action: stop,
    stores: ['asks stopped', 'output cancelled by stop', 'state stopped'],
    then: 'stopped',
  },
  { name: 'rate limited', setup: rateLimited, action: stop, stores: ['asks stopped', 'state stopped'] },
  // Pause: waits for the step's answer, or the command's end; at once from a rate limit.
  {
    name: 'thinking (something streamed: kept for the answer)',
    setup: thinking,
    action: pause,
    streamed: 'Let me lo',
    stores: ['asks paused'],
    then: 'running',
  },
  { name: 'running a command', setup: executingAgents, action: pause, stores: ['asks paused'], then: 'running' },
  { name: 'rate limited', setup: rateLimited, action: pause, stores: ['asks paused', 'state paused'] },
  // A message while the agent works, by the conversation's double_texting.
  { name: 'thinking, enqueue (default)', setup: thinking, action: message, stores: ['user message "and now this"'] },
  {
    name: 'thinking, enqueue',
    setup: thinking,
    doubleTexting: 'enqueue',
    action: message,
    stores: ['user message "and now this"'],
    then: 'running',
  },
  {
    name: 'thinking, interrupt',
    setup: thinking,
    doubleTexting: 'interrupt',
    action: message,
    streamed: 'Sure',
    stores: [
      'interrupt',
      'agent message "Sure" interrupted',
      'state awaiting_user_input',
      'user message "and now this"',
      'state running',
    ],
    then: 'running',
  },
  {
    name: 'running a command, interrupt',
    setup: executingAgents,
    doubleTexting: 'interrupt',
    action: message,
    stores: [
      'interrupt',
      'output cancelled by interrupt',
      'state awaiting_user_input',
      'user message "and now this"',
      'state running',
    ],
    then: 'running',
  },
  {
    name: 'rate limited, interrupt',
    setup: rateLimited,
    doubleTexting: 'interrupt',
    action: message,
    stores: ['interrupt', 'state awaiting_user_input', 'user message "and now this"', 'state running'],
    then: 'running',
  },
  { name: 'thinking, reject', setup: thinking, doubleTexting: 'reject', action: message, refuses: 'AGENT_BUSY' },
  {
    name: 'running a command, reject',
    setup: executingAgents,
    doubleTexting: 'reject',
    action: message,
    refuses: 'AGENT_BUSY',
  },
  { name: 'rate limited, reject', setup: rateLimited, doubleTexting: 'reject', action: message, refuses: 'AGENT_BUSY' },
  // Not working: every policy takes the message as before.
  {
    name: 'loading, reject (queued)',
    setup: () => undefined,
    doubleTexting: 'reject',
    action: message,
    stores: ['user message "and now this"'],
    then: 'loading',
  },
  {
    name: 'awaiting the user, reject',
    setup: awaiting,
    doubleTexting: 'reject',
    action: message,
    stores: ['user message "and now this"', 'state running'],
  },
  {
    name: 'awaiting the user, interrupt',
    setup: awaiting,
    doubleTexting: 'interrupt',
    action: message,
    stores: ['user message "and now this"', 'state running'],
  },
];

describe('a user action while the agent works: state × action → stored facts', () => {
  it.each(TABLE.map((row) => ({ ...row, what: JSON.stringify(row.action) })))('$what in $name', (row) => {
    const c = new Conversation(row.doubleTexting, row.confirmationMode);
    row.setup(c);
    const before = c.events.length;
    const streamed = row.streamed === undefined ? undefined : streamedOf(c, row.streamed);
    const decision = c.tryDecide({ type: 'user_action', action: row.action, ...(streamed && { streamed }) });
    if (row.refuses) {
      expect(decision).toMatchObject({ ok: false, code: row.refuses });
      expect(c.events.length, 'a refusal stores nothing').toBe(before);
      return;
    }
    expect(decision.ok, decision.ok ? '' : decision.reason).toBe(true);
    expect(c.events.slice(before).map(brief)).toEqual(row.stores);
    if (row.then) expect(c.state).toBe(row.then);
    // The decider's log folds to where it says it leads, with every state fact where it is due.
    expect(logViolations(c.events)).toEqual([]);
    expect(agentStateOf(foldEvents(c.events).snapshot)).toBe(c.state);
  });
});

describe('what an interrupt leaves behind', () => {
  it("stores the partial reply under the step's item and attempt, and asks for no effect of the cut step", () => {
    const c = new Conversation();
    thinking(c);
    const step = c.step;
    c.decide({ type: 'user_action', action: interrupt, streamed: streamedOf(c, 'Let me lo') });
    const partial = c.events.find((e) => e.type === 'message' && e.source === 'agent');
    expect(partial).toMatchObject({
      cause: step,
      data: { content: 'Let me lo', item_id: String(step), attempt: 1, deltas: 9, interrupted: true },
    });
    expect(effectsOf(c.snapshot)).toEqual([]);
    // Nothing else is stored for that step: its late answer is refused...
    const late = { type: 'agent_answered', cause: step, answer: { type: 'message', content: 'Let me look' } } as const;
    expect(c.tryDecide(late)).toMatchObject({ ok: false, code: 'ILLEGAL_TRANSITION' });
    // ...but what its LLM call used still counts, in any active state.
    const usage = { prompt_tokens: 10, completion_tokens: 3, cost: 0.01 };
    expect(c.decide({ type: 'agent_used', usage }).map(brief)).toEqual(['agent_usage']);
    expect(c.snapshot.context.spent).toBeCloseTo(0.01);
  });

  it('ignores text streamed by another step or an older attempt (nothing of it is stored)', () => {
    const c = new Conversation();
    thinking(c);
    const other = { ...streamedOf(c, 'stale'), attempt: 2 };
    const events = c.decide({ type: 'user_action', action: interrupt, streamed: other });
    expect(events.map(brief)).toEqual(['interrupt', 'state awaiting_user_input']);
  });

  it('reports the running command as cancelled by the user, not as interrupted by a crash, and asks no effect for it', () => {
    const c = new Conversation();
    executingAgents(c);
    const command = c.snapshot.context.pendingCommand!.eventId;
    expect(effectsOf(c.snapshot)).toEqual([{ type: 'run_command', cause: command, command: 'sleep 60' }]);
    c.decide({ type: 'user_action', action: interrupt });
    const output = c.events.at(-2);
    expect(output).toMatchObject({
      type: 'command_output',
      cause: command,
      data: { cancelled: 'interrupt', exit_code: null },
    });
    expect(output?.type === 'command_output' && output.data.output).toMatch(/^cancelled: the user interrupted/);
    expect(c.snapshot.context.pendingCommand).toBeNull();
    expect(effectsOf(c.snapshot)).toEqual([]);
    // The killed process's own late output is refused: the command has its one result.
    const late = { exit_code: 130, output: '', timed_out: false, truncated: false };
    expect(c.tryDecide({ type: 'command_finished', cause: command, command: 'sleep 60', result: late })).toMatchObject({
      ok: false,
    });
  });

  it('stores a usage report in every active state, and none while loading', () => {
    const usage = { prompt_tokens: 1, completion_tokens: 1, cost: 0.001 };
    for (const setup of [thinking, awaiting, stopped, paused, finished, failed, rateLimited, confirming]) {
      const c = new Conversation(undefined, true);
      setup(c);
      expect(c.decide({ type: 'agent_used', usage }).map(brief), c.state).toEqual(['agent_usage']);
    }
    expect(new Conversation().tryDecide({ type: 'agent_used', usage })).toMatchObject({ ok: false });
  });
});

describe('a pause while the agent works', () => {
  it('stores the step answer and its usage, then pauses; resuming takes a new step', () => {
    const c = new Conversation();
    thinking(c);
    const step = c.step;
    c.decide({ type: 'user_action', action: pause });
    expect(c.state).toBe('running');
    expect(effectsOf(c.snapshot)).toEqual([{ type: 'ask_agent', cause: step, attempt: 1 }]);
    const usage = { prompt_tokens: 10, completion_tokens: 3, cost: 0.01 };
    expect(c.decide({ type: 'agent_used', usage }).map(brief)).toEqual(['agent_usage']);
    const answer = { type: 'agent_answered', cause: step, answer: { type: 'message', content: 'Done.' } } as const;
    expect(c.decide(answer).map(brief)).toEqual(['agent message "Done."', 'state paused']);
    expect(
      c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'running' } }).map(brief),
    ).toEqual(['asks running', 'state running']);
    expect(effectsOf(c.snapshot)).toEqual([{ type: 'ask_agent', cause: c.step, attempt: 1 }]);
  });

  it('holds a command the step chose, unrun through a passivation or a crash, and runs it on resume', () => {
    const c = new Conversation();
    thinking(c);
    c.decide({ type: 'user_action', action: pause });
    const run = {
      type: 'agent_answered',
      cause: c.step,
      answer: { type: 'run', command: 'make', risk: 'low' },
    } as const;
    expect(c.decide(run).map(brief)).toEqual(['command', 'state paused']);
    const command = c.snapshot.context.pendingCommand!;
    expect(command.held).toBe(true);
    expect(effectsOf(c.snapshot)).toEqual([]);
    // Leaving memory stores no "interrupted" output for it: it never started.
    expect(c.decide({ type: 'passivate', reason: 'idle' }).map((e) => e.type)).toEqual([
      'runtime_status',
      'session_passivated',
    ]);
    c.decide({ type: 'rehydrate', from: 'snapshot', folded: 0 });
    expect(c.state).toBe('paused');
    expect(effectsOf(c.snapshot)).toEqual([]);
    c.decide({ type: 'user_action', action: { type: 'change_agent_state', state: 'running' } });
    expect(effectsOf(c.snapshot)).toContainEqual({ type: 'run_command', cause: command.eventId, command: 'make' });
  });

  it('lets a running command finish, stores its output, then pauses', () => {
    const c = new Conversation();
    executingAgents(c);
    const command = c.snapshot.context.pendingCommand!.eventId;
    c.decide({ type: 'user_action', action: pause });
    expect(effectsOf(c.snapshot)).toEqual([{ type: 'run_command', cause: command, command: 'sleep 60' }]);
    const result = { exit_code: 0, output: 'ok', timed_out: false, truncated: false };
    expect(c.decide({ type: 'command_finished', cause: command, command: 'sleep 60', result }).map(brief)).toEqual([
      'output exit 0',
      'state paused',
    ]);
  });

  it('goes to finished when the step finishes the task, and to error when it fails', () => {
    const a = new Conversation();
    thinking(a);
    a.decide({ type: 'user_action', action: pause });
    a.decide({ type: 'agent_answered', cause: a.step, answer: { type: 'finish', content: 'done' } });
    expect(a.state).toBe('finished');
    const b = new Conversation();
    thinking(b);
    b.decide({ type: 'user_action', action: pause });
    b.decide({ type: 'agent_failed', cause: b.step, code: 'AGENT_FAILED', message: 'boom' });
    expect(b.state).toBe('error');
  });

  it('is cut by an interrupt or a stop like any work, and refuses a second pause', () => {
    const c = new Conversation();
    thinking(c);
    c.decide({ type: 'user_action', action: pause });
    expect(c.tryDecide({ type: 'user_action', action: pause })).toMatchObject({ ok: false });
    c.decide({ type: 'user_action', action: interrupt, streamed: streamedOf(c, 'x') });
    expect(c.state).toBe('awaiting_user_input');
    expect(c.snapshot.context.pausing).toBe(false);
  });
});
