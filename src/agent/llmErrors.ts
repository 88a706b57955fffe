import { TetherError } from '../errors.ts';

/**
 * Errors of the LLM agent. Messages name the HTTP status and what the provider
 * said, never the API key: the key is only ever written to the request header.
 */

/** The endpoint refused the API key (HTTP 401 or 403). Retrying will not help. */
export class LlmAuthenticationError extends TetherError {
  readonly status: number;
  constructor(status: number, options?: { cause?: unknown }) {
    super('LLM_AUTHENTICATION', `the LLM endpoint refused the API key (HTTP ${status})`, options);
    this.status = status;
  }
}

/**
 * The endpoint is rate limiting (HTTP 429). The step is not retried inside the
 * agent: the session stores `agent_error` with `retry_at` = now + `retryAfterMs`
 * and shows `rate_limited` until then.
 */
export class LlmRateLimitError extends TetherError {
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number, detail: string, options?: { cause?: unknown }) {
    super(
      'LLM_RATE_LIMITED',
      `the LLM endpoint is rate limiting${suffix(detail)}; retry in ${retryAfterMs} ms`,
      options,
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** The account has no quota left (HTTP 429 `insufficient_quota`): waiting does not help. */
export class LlmQuotaExceededError extends TetherError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super('LLM_QUOTA_EXCEEDED', `the LLM account has no quota left${suffix(detail)}`, options);
  }
}

/** 5xx, 408, a timeout or a network failure, still failing after every retry. */
export class LlmServerError extends TetherError {
  /** The last HTTP status, or null when the last attempt got no response. */
  readonly status: number | null;
  readonly attempts: number;
  constructor(status: number | null, attempts: number, detail: string, options?: { cause?: unknown }) {
    const what = status === null ? 'could not be reached' : `failed with HTTP ${status}`;
    super('LLM_SERVER_ERROR', `the LLM endpoint ${what} (${attempts} attempts)${suffix(detail)}`, options);
    this.status = status;
    this.attempts = attempts;
  }
}

/** Any other 4xx: the request itself was refused (unknown model, context too long, ...). */
export class LlmRequestError extends TetherError {
  readonly status: number;
  constructor(status: number, detail: string, options?: { cause?: unknown }) {
    super('LLM_REQUEST_REJECTED', `the LLM endpoint rejected the request (HTTP ${status})${suffix(detail)}`, options);
    this.status = status;
  }
}

/** A 2xx answer that is not a usable chat completion, or a tool call that cannot become an action. */
export class LlmResponseError extends TetherError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('LLM_BAD_RESPONSE', `the LLM answer is unusable: ${message}`, options);
  }
}

function suffix(detail: string): string {
  return detail ? `: ${detail}` : '';
}
