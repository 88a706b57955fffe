import { z } from 'zod';
import { AgentState, RuntimeStatus } from './agentState.ts';
import { callId, CommandOutputData, ratings, ToolInfo, ToolResultData } from './calls.ts';
import { ConversationId } from './ids.ts';

/** Version of the stored event envelope. */
export const EVENT_VERSION = 1;

export const EventSource = z.enum(['user', 'agent', 'environment']);
export type EventSource = z.infer<typeof EventSource>;

const envelope = {
  v: z.literal(EVENT_VERSION),
  id: z.number().int().min(0).describe('Dense per conversation, from 0.'),
  conversation_id: ConversationId,
  ts: z.iso.datetime().describe('ISO 8601, UTC.'),
  source: EventSource,
  cause: z.number().int().min(0).optional().describe('id of the event that caused this one.'),
};

/** What a user message does while the agent works (`conversation_created.double_texting`). */
export const DoubleTexting = z.enum(['enqueue', 'interrupt', 'reject']);
export type DoubleTexting = z.infer<typeof DoubleTexting>;

/** The repository a conversation's workspace is a clone of: names only, never a token. */
export const RepositorySpec = z.object({
  url: z.string().describe('An https, http or ssh URL (file only where the server allows it); never with a password.'),
  branch: z.string().optional().describe("The branch to check out (absent: the remote's default)."),
  token_secret: z
    .string()
    .optional()
    .describe("The name of the conversation's secret that holds the git provider token (never the token)."),
});
export type RepositorySpec = z.infer<typeof RepositorySpec>;

/** One of the repository's instruction files, as read once after the clone. */
export const InstructionsFile = z.object({
  path: z.string().describe('Relative to the workspace: AGENTS.md or .openhands/microagents/repo.md.'),
  text: z.string().describe("Its text, secrets masked, cut at 64 KiB (on a character's boundary)."),
  bytes: z.number().int().min(0).describe('Its size in bytes on disk.'),
  truncated: z.boolean(),
});

export const ConversationCreatedData = z.object({
  user: z.string(),
  initial_message: z.string().optional(),
  confirmation_mode: z.boolean(),
  max_iterations: z.number().int().min(1),
  max_budget: z.number().min(0).optional(),
  max_rate_limit_retries: z
    .number()
    .int()
    .min(0)
    .optional()
    .describe(
      'Rate-limited agent steps tried again in a row before the agent gives up in error (absent: 5, the bound before it was recorded).',
    ),
  max_attempts: z
    .number()
    .int()
    .min(1)
    .optional()
    .describe(
      'Attempts one agent step may take (a rate limit, a server error, a cut stream, its owner lost) before the agent gives up in error (absent: the bounds before it was recorded: 4 tries of a failing server, 5 rate limits in a row, a retried step counted as one more iteration).',
    ),
  double_texting: DoubleTexting.optional().describe(
    'What a user message does while the agent works (`running`, `rate_limited`): `enqueue` (stored, read at the next step), `interrupt` (the agent is interrupted first), `reject` (refused with AGENT_BUSY, nothing stored). Absent: enqueue.',
  ),
  instructions: z.string().optional(),
  repository: RepositorySpec.optional().describe('Cloned into the workspace when the runtime first starts.'),
  secret_names: z.array(z.string()).describe('Names only; values never reach the log.'),
  replay: z.boolean(),
  replay_actions: z
    .array(
      z.discriminatedUnion('type', [
        z.object({
          type: z.literal('message'),
          content: z.string(),
          wait_for_response: z.literal(false).optional(),
          call_id: z.string().optional(),
        }),
        z.object({
          type: z.literal('run'),
          command: z.string(),
          security_risk: z.enum(['LOW', 'MEDIUM', 'HIGH']).optional().describe('As recorded (since version 10).'),
        }),
        z.object({
          type: z.literal('calls'),
          calls: z
            .array(z.object({ id: z.string(), name: z.string(), arguments: z.record(z.string(), z.unknown()) }))
            .min(1),
        }),
        z.object({ type: z.literal('finish'), content: z.string(), call_id: z.string().optional() }),
      ]),
    )
    .optional()
    .describe("A recorded trajectory's agent actions, replayed in order instead of asking the agent."),
  start_timeout_ms: z
    .number()
    .int()
    .min(1)
    .optional()
    .describe('The session reports error if it has not started this long after `ts`.'),
  machine_version: z
    .number()
    .int()
    .min(1)
    .optional()
    .describe(
      'The session machine version that created the conversation (absent: 3, the last before it was recorded).',
    ),
});

export const PassivationReason = z.enum(['close_delay', 'idle', 'capacity', 'too_many_running', 'shutdown']);
export type PassivationReason = z.infer<typeof PassivationReason>;

/** Why an agent step is tried again (`agent_attempt`). */
export const AttemptReason = z.enum([
  'rate_limited',
  'server_error',
  'network',
  'stream_cut',
  'owner_lost',
  'resumed',
  'forked',
]);
export type AttemptReason = z.infer<typeof AttemptReason>;

/** What an agent event made by one step says of the step's streamed reply. */
const streamed = {
  item_id: z
    .string()
    .optional()
    .describe('The step this event answers: the `item_id` of its `delta` frames (opaque; kept by a fork).'),
  attempt: z.number().int().min(1).optional().describe('The attempt of the step that produced it, from 1.'),
  deltas: z
    .number()
    .int()
    .min(0)
    .optional()
    .describe('How many `delta` frames that attempt streamed (0: it did not stream).'),
};
const thought = z
  .string()
  .optional()
  .describe(
    'The text the model streamed with the tool calls this action was made from (its deltas joined; on the first call of a reply).',
  );

/** One stored event. The same bytes are on NATS, in REST answers and in ws `event` frames. */
export const StoredEvent = z
  .discriminatedUnion('type', [
    z.object({ ...envelope, type: z.literal('conversation_created'), data: ConversationCreatedData }),
    z.object({
      ...envelope,
      type: z.literal('message'),
      data: z.object({
        content: z.string(),
        ...streamed,
        interrupted: z
          .literal(true)
          .optional()
          .describe(
            "Only on an agent's message: the user interrupted the step, and `content` is what its attempt had streamed by then.",
          ),
        call_id: callId.describe('Only on an agent message made from an `ask_user` call: its id.'),
        wait_for_response: z
          .literal(false)
          .optional()
          .describe(
            "Only on an agent's message: false when the agent goes on with another step instead of waiting for the user.",
          ),
      }),
    }),
    z.object({
      ...envelope,
      type: z.literal('command'),
      data: z.object({
        command: z.string(),
        call_id: callId,
        ...ratings,
        ...streamed,
        thought,
      }),
    }),
    z.object({
      ...envelope,
      type: z.literal('tool_call'),
      data: z
        .object({
          call_id: z.string(),
          tool: z
            .string()
            .describe('`read_file`, `write_file`, an MCP tool as `<server>__<tool>`, or any name the model used.'),
          arguments: z
            .record(z.string(), z.unknown())
            .describe('As the model gave them (secrets masked), `security_risk` included.'),
          ...ratings,
          ...streamed,
          thought,
        })
        .describe('An agent tool call other than a shell command; its `tool_result` names the same `call_id`.'),
    }),
    z.object({ ...envelope, type: z.literal('tool_result'), data: ToolResultData }),
    z.object({
      ...envelope,
      type: z.literal('tools_listed'),
      data: z
        .object({
          servers: z.array(z.object({ name: z.string(), tools: z.array(ToolInfo) })),
        })
        .describe(
          "The MCP servers' tools, listed when a runtime started and stored when they changed: the tools the model is offered (as `<server>__<tool>`) from here on.",
        ),
    }),
    z.object({ ...envelope, type: z.literal('command_output'), data: CommandOutputData }),
    z.object({
      ...envelope,
      type: z.literal('finish'),
      data: z.object({ content: z.string(), call_id: callId, ...streamed, thought }),
    }),
    z.object({
      ...envelope,
      type: z.literal('change_agent_state'),
      data: z.object({ state: AgentState }).describe('A user asked for this agent state.'),
    }),
    z.object({
      ...envelope,
      type: z.literal('interrupt'),
      data: z
        .object({})
        .describe(
          'A user interrupted the agent while it worked: the step and any running command are cancelled, and the agent awaits the user.',
        ),
    }),
    z.object({
      ...envelope,
      type: z.literal('reconnect_runtime'),
      data: z
        .object({})
        .describe('A user asked for a new runtime in the same workspace (after the old one died, or from error).'),
    }),
    z.object({
      ...envelope,
      type: z.literal('agent_state_changed'),
      data: z.object({ state: AgentState, reason: z.string().optional() }),
    }),
    z.object({
      ...envelope,
      type: z.literal('runtime_status'),
      data: z.object({ status: RuntimeStatus, message: z.string().optional() }),
    }),
    z.object({
      ...envelope,
      type: z.literal('agent_error'),
      data: z.object({
        code: z.string(),
        message: z.string(),
        retry_at: z.iso.datetime().optional().describe('When a rate-limited step is tried again.'),
      }),
    }),
    z.object({
      ...envelope,
      type: z.literal('agent_attempt'),
      data: z
        .object({
          item_id: z.string(),
          attempt: z.number().int().min(2),
          reason: AttemptReason,
          message: z.string().optional().describe('What went wrong with the attempt before, in words.'),
        })
        .describe(
          'The current agent step is tried again as this attempt; its deltas start again from index 0 (stored before the first of them).',
        ),
    }),
    z.object({
      ...envelope,
      type: z.literal('agent_usage'),
      data: z
        .object({
          prompt_tokens: z.number().int().min(0),
          completion_tokens: z.number().int().min(0),
          cost: z.number().min(0).describe('USD, by the configured price per token.'),
        })
        .describe("What the agent's last LLM call used; stored before the action it produced."),
    }),
    z.object({
      ...envelope,
      type: z.literal('timeout'),
      data: z
        .object({ deadline: z.enum(['start', 'retry']), message: z.string() })
        .describe('A deadline kept in the session passed.'),
    }),
    z.object({
      ...envelope,
      type: z.literal('session_passivated'),
      data: z
        .object({ reason: PassivationReason, state: AgentState.describe('The agent state it comes back in.') })
        .describe('The session left memory; a snapshot was written.'),
    }),
    z.object({
      ...envelope,
      type: z.literal('session_rehydrated'),
      data: z
        .object({ from: z.enum(['snapshot', 'log']), events_folded: z.number().int().min(0) })
        .describe('The session came back into memory.'),
    }),
    z.object({
      ...envelope,
      type: z.literal('machine_upgraded'),
      data: z
        .object({ from: z.number().int().min(1), to: z.number().int().min(1) })
        .describe('The session came back under a newer machine version than the one that wrote its log so far.'),
    }),
    z.object({
      ...envelope,
      type: z.literal('conversation_forked'),
      data: z
        .object({
          conversation_id: ConversationId.describe('The parent conversation.'),
          seq: z.number().int().min(1).describe("Stream sequence of the parent's last event copied."),
        })
        .describe(
          "This conversation is a fork: the events before this one are copies of the parent's through seq (ids, times, causes and data kept).",
        ),
    }),
    z.object({
      ...envelope,
      type: z.literal('repository_cloned'),
      data: z
        .object({ url: z.string(), branch: z.string(), commit: z.string() })
        .describe(
          'The workspace holds the repository of `conversation_created`, at this commit: it is never cloned again.',
        ),
    }),
    z.object({
      ...envelope,
      type: z.literal('repository_clone_failed'),
      data: z
        .object({ url: z.string(), branch: z.string().optional(), message: z.string() })
        .describe(
          'The clone failed (a bad URL or branch, a refused token, a timeout): the agent is in error until a `reconnect_runtime` tries again.',
        ),
    }),
    z.object({
      ...envelope,
      type: z.literal('instructions_loaded'),
      data: z
        .object({ files: z.array(InstructionsFile) })
        .describe(
          "The repository's instruction files, read once after the clone; the agent's system prompt holds them.",
        ),
    }),
    z.object({
      ...envelope,
      type: z.literal('session_closed'),
      data: z.object({ reason: z.string() }).describe('The conversation ended for good.'),
    }),
  ])
  .meta({
    title: 'Tether stored event',
    description: 'One event of a conversation, as stored on NATS subject tether.conv.<conversation_id>.events.',
  });
export type StoredEvent = z.infer<typeof StoredEvent>;
export type StoredEventType = StoredEvent['type'];
export type EventOf<T extends StoredEventType> = Extract<StoredEvent, { type: T }>;

/** An event as the session produces it, before the host stamps id, ts and conversation_id. */
export type NewEvent = {
  [T in StoredEventType]: Omit<EventOf<T>, 'v' | 'id' | 'conversation_id' | 'ts'>;
}[StoredEventType];

/** A stored event with its position in the stream. */
export const LoggedEvent = z.object({ seq: z.number().int().min(1), event: StoredEvent });
export type LoggedEvent = z.infer<typeof LoggedEvent>;
