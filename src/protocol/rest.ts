import { z } from 'zod';
import { AgentState, RuntimeStatus } from './agentState.ts';
import { LoggedEvent } from './event.ts';
import { ClientId, ConversationId } from './ids.ts';
import { MAX_MESSAGE_CHARS, UserAction } from './frames.ts';

export const DEFAULT_MAX_ITERATIONS = 100;

export const CreateConversationBody = z
  .object({
    initial_message: z.string().min(1).max(MAX_MESSAGE_CHARS).optional(),
    confirmation_mode: z.boolean().default(false),
    max_iterations: z.number().int().min(1).max(10_000).default(DEFAULT_MAX_ITERATIONS),
    max_budget: z.number().min(0).optional(),
    secrets: z
      .record(
        z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'secret names are environment variable names'),
        z
          .string()
          .min(4, 'a secret value has at least 4 characters (shorter ones cannot be masked safely)')
          .max(10_000),
      )
      .default({}),
    instructions: z.string().max(MAX_MESSAGE_CHARS).optional(),
    /** A recorded trajectory: what `GET /api/conversations/:id/events` answers, or just its `items`. */
    replay: z
      .union([z.array(LoggedEvent), z.object({ items: z.array(LoggedEvent) }).transform((page) => page.items)])
      .optional(),
  })
  .strict();
export type CreateConversationBody = z.infer<typeof CreateConversationBody>;

export const ActionBody = z.object({ action: UserAction, client_id: ClientId.optional() }).strict();
export type ActionBody = z.infer<typeof ActionBody>;

export const EventsQuery = z.object({
  after_seq: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

export const ConversationInfo = z.object({
  conversation_id: ConversationId,
  user: z.string(),
  created_at: z.iso.datetime(),
  state: AgentState,
  runtime_status: RuntimeStatus,
  in_memory: z.boolean(),
  last_seq: z.number().int().min(0),
});
export type ConversationInfo = z.infer<typeof ConversationInfo>;
