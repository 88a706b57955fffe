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
 * The endpoint is rate limiting (HTTP 429, or a rate-limit error event inside a
 * stream). The step is not retried inside the agent: the session stores
 * `agent_error` with `retry_at` = now + `retryAfterMs` and shows `rate_limited`
 * until then.
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

/** Why a step failed in a way that trying it again may cure; see `LlmServerError`. */
export type LlmServerErrorReason = 'server_error' | 'network' | 'stream_cut';

/**
 * A step that may succeed if tried again. The agent makes one HTTP exchange per
 * step and never retries it: the session stores the failure and tries a new
 * attempt itself. `reason` says what went wrong:
 * - `server_error`: HTTP 5xx or 408, or an error event inside a stream;
 * - `network`: no answer came (timeout, refused connection, reset before the
 *   status line);
 * - `stream_cut`: a 2xx answer started and did not end: its body broke off,
 *   timed out, or the stream ended without `[DONE]` and without a `finish_reason`.
 */
export class LlmServerError extends TetherError {
  readonly reason: LlmServerErrorReason;
  /** The HTTP status that failed; null without one (`network`, `stream_cut`, an error event in a stream). */
  readonly status: number | null;
  /** Always 1: the agent sends each step once; the session counts its own attempts. */
  readonly attempts: number = 1;
  constructor(reason: LlmServerErrorReason, status: number | null, detail: string, options?: { cause?: unknown }) {
    super('LLM_SERVER_ERROR', `the LLM endpoint ${what(reason, status)}${suffix(detail)}`, options);
    this.reason = reason;
    this.status = status;
  }
}

function what(reason: LlmServerErrorReason, status: number | null): string {
  switch (reason) {
    case 'server_error':
      return status === null ? 'reported an error while streaming' : `failed with HTTP ${status}`;
    case 'network':
      return 'could not be reached';
    case 'stream_cut':
      return 'cut its answer short';
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

/** At most `max` characters of a provider's text, for an error message. */
export function clip(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
