import { ZodError } from 'zod';
import { TetherError } from '../errors.ts';

export interface PublicError {
  status: number;
  code: string;
  message: string;
}

const STATUS_BY_CODE: Record<string, number> = {
  CONVERSATION_NOT_FOUND: 404,
  BAD_SEQ: 400,
  ILLEGAL_TRANSITION: 409,
  AGENT_BUSY: 409,
  SESSION_UNAVAILABLE: 503,
  STORE_UNAVAILABLE: 503,
  VERSION_CONFLICT: 409,
  // Cluster: the owner is moving or gone; a retry finds the new one.
  NODE_DRAINING: 503,
  NODE_LEASE_LAPSED: 503,
  NODE_UNREACHABLE: 503,
  NOT_OWNER: 503,
  OWNER_CONTENDED: 503,
};

/** What a user is told about an error: our own errors keep their code; anything else is internal. */
export function toPublicError(err: unknown): PublicError {
  if (err instanceof ZodError) return { status: 400, code: 'BAD_REQUEST', message: formatZodError(err) };
  if (err instanceof BadRequestError) return { status: err.status, code: err.code, message: err.message };
  if (err instanceof TetherError) {
    return { status: STATUS_BY_CODE[err.code] ?? 400, code: err.code, message: err.message };
  }
  return { status: 500, code: 'INTERNAL', message: 'internal error' };
}

export function formatZodError(err: ZodError): string {
  return err.issues
    .slice(0, 5)
    .map((i) => (i.path.length > 0 ? `${i.path.join('.')}: ${i.message}` : i.message))
    .join('; ');
}

/** A request the edge refuses before it reaches the core. */
export class BadRequestError extends TetherError {
  readonly status: number;
  constructor(code: string, message: string, status = 400) {
    super(code, message);
    this.status = status;
  }
}
