import { describe, expect, it } from 'vitest';
import { agentStateOf, decide, DEFAULT_RATE_LIMIT_RETRIES, foldEvents, inputFrom } from '../../machines/index.ts';
import type { EventOf, StoredEvent } from '../../protocol/index.ts';

type Created = EventOf<'conversation_created'>;
type Body = Pick<StoredEvent, 'source' | 'type' | 'data'> & { cause?: number };

const at = (seconds: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, seconds)).toISOString();

function created(data: Partial<Created['data']> = {}): Created {
  return {
    v: 1,
    id: 0,
    conversation_id: 'c1',
    ts: at(0),
    source: 'user',
    type: 'conversation_created',
    data: { user: 'u', confirmation_mode: false, max_iterations: 10, secret_names: [], replay: false, ...data },
  };
}

/** After the creation: the runtime up, a message, then a rate limit, the wait over, and a second rate limit in a row. */
const rateLimitedTwice: Body[] = [
  { source: 'environment', type: 'runtime_status', data: { status: 'connected' } },
  { source: 'user', type: 'message', data: { content: 'hi' } },
  {
    source: 'agent',
    type: 'agent_error',
    data: { code: 'LLM_RATE_LIMITED', message: 'slow down', retry_at: at(3) },
    cause: 2,
  },
  { source: 'environment', type: 'timeout', data: { deadline: 'retry', message: 'the wait is over' } },
  {
    source: 'agent',
    type: 'agent_error',
    data: { code: 'LLM_RATE_LIMITED', message: 'slow down', retry_at: at(6) },
    cause: 4,
  },
];

/** The agent state after each event of the log that `first` starts. */
function statesAfter(first: Created): string[] {
  const log = [first, ...rateLimitedTwice.map((body, i) => ({ ...first, ...body, id: i + 1, ts: at(i + 1) }))];
  return log.slice(2).map((_, i) => agentStateOf(foldEvents(log.slice(0, i + 3) as StoredEvent[]).snapshot));
}

describe("the machine's input, read from conversation_created", () => {
  it('takes the rate-limit retry bound from the log, and 5 when the log does not record one (as before)', () => {
    expect(inputFrom(created()).maxRateLimitRetries).toBe(DEFAULT_RATE_LIMIT_RETRIES);
    expect(DEFAULT_RATE_LIMIT_RETRIES).toBe(5);
    expect(inputFrom(created({ max_rate_limit_retries: 0 })).maxRateLimitRetries).toBe(0);
    expect(inputFrom(created({ max_rate_limit_retries: 7 })).maxRateLimitRetries).toBe(7);
  });

  it('folds a log by the bound it records: a second rate limit in a row waits again, or ends in error', () => {
    const [unrecorded, one, none] = [
      created(),
      created({ max_rate_limit_retries: 1 }),
      created({ max_rate_limit_retries: 0 }),
    ];
    expect(statesAfter(unrecorded)).toEqual(['running', 'rate_limited', 'running', 'rate_limited']);
    expect(statesAfter(one)).toEqual(['running', 'rate_limited', 'running', 'error']);
    expect(statesAfter(none)[1]).toBe('error');
  });

  it('is stored by the decider with the creation, and the first snapshot keeps it', () => {
    const data = { ...created({ max_rate_limit_retries: 2 }).data };
    const decision = decide(
      undefined,
      { type: 'create', conversationId: 'c1', data },
      {
        conversationId: 'c1',
        nextEventId: 0,
        now: new Date(at(0)),
      },
    );
    expect(decision.ok && decision.events[0]).toMatchObject({ data: { max_rate_limit_retries: 2 } });
    expect(decision.ok && decision.snapshot.context.maxRateLimitRetries).toBe(2);
  });
});
