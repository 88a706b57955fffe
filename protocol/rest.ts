import { z } from 'zod';
import { AgentState, RuntimeStatus } from './agentState.ts';
import { DoubleTexting, LoggedEvent, RepositorySpec, StoredEvent } from './event.ts';
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
    /** Cloned into the workspace before the agent's first step (checked further by the server: scheme, token_secret). */
    repository: RepositorySpec.strict().optional(),
    /** What a user message does while the agent works (default enqueue); stored in `conversation_created`, kept by a fork. */
    double_texting: DoubleTexting.optional(),
    /** A recorded trajectory: what `GET /api/conversations/:id/events` answers, or just its `items`. */
    replay: z
      .union([z.array(LoggedEvent), z.object({ items: z.array(LoggedEvent) }).transform((page) => page.items)])
      .optional(),
  })
  .strict()
  .superRefine((body, ctx) => {
    const problem = body.repository && repositoryProblem(body.repository, body.secrets);
    if (problem) ctx.addIssue({ code: 'custom', path: ['repository'], message: problem });
  });

const REPOSITORY_SCHEMES = new Set(['https:', 'http:', 'ssh:', 'file:']);

/**
 * What is wrong with a repository to clone, or null: a URL git takes (https,
 * http, ssh or file) with no password in it (an ssh user name is fine; an
 * https token goes in a secret named by `token_secret`, which must be one of
 * the conversation's). Reachability and the branch are for the clone to report.
 */
export function repositoryProblem(
  repository: { url: string; token_secret?: string | undefined },
  secrets: Record<string, string>,
): string | null {
  let url: URL;
  try {
    url = new URL(repository.url);
  } catch {
    return 'repository.url is not a URL (use https://, http:// or ssh://; for host:path write ssh://host/path)';
  }
  if (!REPOSITORY_SCHEMES.has(url.protocol))
    return `repository.url: ${url.protocol} URLs are not cloned (use https, http or ssh)`;
  if (url.password || (url.username && url.protocol !== 'ssh:')) {
    return 'repository.url holds credentials: put the token in a secret and name it in repository.token_secret';
  }
  if (repository.token_secret !== undefined && !(repository.token_secret in secrets)) {
    return `repository.token_secret names no secret of this conversation (${repository.token_secret})`;
  }
  return null;
}
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
  /** The node that runs it now (its heartbeat current), or null: none does until the next action wakes it. */
  owner: z.string().nullable(),
  /** The conversation and stream sequence it was forked from, or null when it was created. */
  forked_from: z.object({ conversation_id: ConversationId, seq: z.number().int().min(1) }).nullable(),
  /** How the answering node confines commands: `bwrap` (a bubblewrap sandbox) or `none` (TETHER_SANDBOX). */
  sandbox: z.enum(['bwrap', 'none']),
});
export type ConversationInfo = z.infer<typeof ConversationInfo>;

/** A node of the cluster as its last heartbeat described it (`GET /api/cluster`). */
export const ClusterNode = z.object({
  node_id: z.string(),
  /** Where clients reach it: TETHER_PUBLIC_URL, or the host and port it listens on. */
  url: z.string().nullable(),
  live_sessions: z.number().int().min(0),
  started_at: z.string(),
  last_heartbeat: z.iso.datetime(),
});
export type ClusterNode = z.infer<typeof ClusterNode>;

/** `GET /api/cluster`: the nodes whose heartbeat is current, and which one answered. */
export const ClusterView = z.object({ node_id: z.string(), nodes: z.array(ClusterNode) });
export type ClusterView = z.infer<typeof ClusterView>;

/** `GET /api/cluster?conversation=<id>`: the node that runs it, or null when none does. */
export const ConversationOwner = z.object({
  conversation_id: ConversationId,
  owner: ClusterNode.nullable(),
});
export type ConversationOwner = z.infer<typeof ConversationOwner>;

export const ClusterQuery = z.object({ conversation: ConversationId.optional() });

/** `?at_seq=`: a stream sequence of one of the conversation's events (absent: its last event). */
export const StateQuery = z.object({ at_seq: z.string().optional() });

/** `DELETE /api/conversations/:id?keep_workspace=true`: the workspace folder stays (default: it goes). */
export const DeleteQuery = z.object({
  keep_workspace: z.enum(['true', 'false'], 'keep_workspace is true or false').default('false'),
});

/** `POST /api/conversations/:id/fork`. */
// Any number (not a number: BAD_REQUEST); one that is not one of the parent's events is a BAD_SEQ, as for GET .../state.
export const ForkBody = z.object({ at_seq: z.number() }).strict();
export type ForkBody = z.infer<typeof ForkBody>;

/**
 * `GET /api/conversations/:id/state`: the conversation right after its event
 * at `seq`, by a pure fold of the log (nothing runs, nothing is stored).
 */
export const ConversationState = z.object({
  seq: z.number().int().min(1),
  /** The agent state. */
  state: AgentState,
  /** The statechart's state value, e.g. `{"active": {"running": "thinking"}}`. */
  value: z.unknown(),
  /** The machine's context. */
  context: z.record(z.string(), z.unknown()),
  /** The stored event at `seq`. */
  event: StoredEvent,
  /** The transition that event caused (state paths before and after), or null when the machine does not take it. */
  transition: z.object({ from: z.array(z.string()), to: z.array(z.string()) }).nullable(),
});
export type ConversationState = z.infer<typeof ConversationState>;

/** Items a list page holds at most (`limit`), and by default. */
export const MAX_LIST_LIMIT = 1000;
export const DEFAULT_LIST_LIMIT = 100;

/** Where a list page starts: after this conversation (its place in its user's creation order), newest first. */
export interface ListPosition {
  ordinal: number;
  conversation_id: string;
}

/**
 * A list cursor as clients see it: opaque (base64url of JSON), handed back
 * as `?cursor=` unchanged. Only a cursor this server gave parses.
 */
export function encodeListCursor(position: ListPosition): string {
  const base64 = btoa(JSON.stringify([position.ordinal, position.conversation_id]));
  return base64.replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

const CursorFields = z.tuple([z.number().int().min(0), ConversationId]);

function decodeListCursor(cursor: string): ListPosition | undefined {
  try {
    const json = atob(cursor.replaceAll('-', '+').replaceAll('_', '/'));
    const parsed = CursorFields.safeParse(JSON.parse(json));
    return parsed.success ? { ordinal: parsed.data[0], conversation_id: parsed.data[1] } : undefined;
  } catch {
    return undefined;
  }
}

export const ConversationsQuery = z.object({
  limit: z.coerce
    .number()
    .int('limit is a whole number')
    .min(1, 'limit is at least 1')
    .max(MAX_LIST_LIMIT, `limit is at most ${MAX_LIST_LIMIT}: page with next_cursor for more`)
    .default(DEFAULT_LIST_LIMIT),
  cursor: z
    .string()
    .max(512, 'cursor is not one this server gave')
    .transform((cursor, ctx) => {
      const position = decodeListCursor(cursor);
      if (position === undefined) ctx.addIssue({ code: 'custom', message: 'cursor is not one this server gave' });
      return position ?? z.NEVER;
    })
    .optional(),
});
export type ConversationsQuery = z.infer<typeof ConversationsQuery>;

/** One item of `GET /api/conversations`: the user's index entry and the log's last sequence now. */
export const ConversationSummary = ConversationInfo.omit({
  runtime_status: true,
  owner: true,
  forked_from: true,
  sandbox: true,
});
export type ConversationSummary = z.infer<typeof ConversationSummary>;

export const ConversationPage = z.object({
  items: z.array(ConversationSummary),
  /** Pass back as `?cursor=` for the next page; null when this page is the last. */
  next_cursor: z.string().nullable(),
});
export type ConversationPage = z.infer<typeof ConversationPage>;
