import type { EventOf } from '../protocol/index.ts';
import type { SessionContext } from './sessionContext.ts';
import { DEFAULT_RATE_LIMIT_RETRIES, UNRECORDED_MACHINE_VERSION, type SessionInput } from './sessionContext.ts';

/** The machine's input, from a conversation's first event: every limit the machine keeps is recorded there. */
export function inputFrom(created: EventOf<'conversation_created'>): SessionInput & { machineVersion: number } {
  const timeout = created.data.start_timeout_ms;
  return {
    conversationId: created.conversation_id,
    user: created.data.user,
    maxIterations: created.data.max_iterations,
    maxBudget: created.data.max_budget ?? null,
    maxRateLimitRetries: created.data.max_rate_limit_retries ?? DEFAULT_RATE_LIMIT_RETRIES,
    maxAttempts: created.data.max_attempts ?? null,
    confirmationMode: created.data.confirmation_mode,
    doubleTexting: created.data.double_texting ?? 'enqueue',
    startDeadline: timeout === undefined ? null : Date.parse(created.ts) + timeout,
    repository: repositoryOf(created.data.repository),
    machineVersion: created.data.machine_version ?? UNRECORDED_MACHINE_VERSION,
  };
}

type CreatedRepository = EventOf<'conversation_created'>['data']['repository'];

/** The repository in the machine's own names (optional fields only when recorded). */
function repositoryOf(repository: CreatedRepository): Omit<NonNullable<SessionContext['repository']>, 'status'> | null {
  if (!repository) return null;
  const { url, branch, token_secret: tokenSecret } = repository;
  return { url, ...(branch !== undefined && { branch }), ...(tokenSecret !== undefined && { tokenSecret }) };
}
