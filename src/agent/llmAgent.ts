import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import type { Agent, AgentAction, AgentContext } from './agent.ts';
import { ChatTranscript } from './chatTranscript.ts';
import {
  LlmAuthenticationError,
  LlmQuotaExceededError,
  LlmRateLimitError,
  LlmRequestError,
  LlmResponseError,
  LlmServerError,
} from './llmErrors.ts';
import { CHAT_TOOLS, toAgentAction, type ChatMessage } from './llmMessages.ts';

/** US dollars per million tokens, for the cost estimate in `LlmUsage`. */
export interface LlmPricing {
  promptUsdPerMillion: number;
  completionUsdPerMillion: number;
}

/** Token counts of one step, as the endpoint reported them. */
export interface LlmUsage {
  conversationId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** Only when `pricing` was given. */
  costUsd?: number;
}

export interface LlmAgentOptions {
  /** Up to the version segment, e.g. `https://api.openai.com/v1`; `/chat/completions` is appended. */
  baseUrl: string;
  model: string;
  /** Sent as `Authorization: Bearer`; never logged and never part of an error. */
  apiKey: string;
  /** Retries of a step after a 5xx, 408, timeout or network error (default 3). */
  maxRetries?: number;
  /** First backoff; it doubles each retry (default 500 ms). */
  retryBaseMs?: number;
  /** Limit of one HTTP attempt, body included (default 120 s). */
  timeoutMs?: number;
  /** Wait proposed after a 429 without a Retry-After header (default 1000 ms). */
  defaultRetryAfterMs?: number;
  maxOutputChars?: number;
  pricing?: LlmPricing;
  /** Called once per successful step with usage; it must not throw. */
  onUsage?: (usage: LlmUsage) => void;
  fetch?: typeof fetch;
  /** Clock for Retry-After dates. */
  now?: () => number;
}

const ToolCall = z.object({
  function: z.object({
    name: z.string(),
    arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).nullish(),
  }),
});
const ChatCompletion = z.object({
  choices: z
    .array(z.object({ message: z.object({ content: z.string().nullish(), tool_calls: z.array(ToolCall).nullish() }) }))
    .min(1),
  usage: z.object({ prompt_tokens: z.number(), completion_tokens: z.number() }).nullish(),
});
type ChatCompletion = z.infer<typeof ChatCompletion>;

/** An attempt that may succeed if tried again. */
interface Transient {
  status: number | null;
  detail: string;
  cause?: unknown;
}

/**
 * An Agent backed by any OpenAI-compatible chat-completions endpoint, with
 * function calling. One step is one completion: transient failures are retried
 * inside the step with exponential backoff; a 429 is thrown at once as
 * `LlmRateLimitError` so the session can show `rate_limited` and schedule the
 * retry itself. `signal` aborts the request and every wait.
 */
export class LlmAgent implements Agent {
  readonly #options: LlmAgentOptions;
  readonly #url: string;
  #lastUsage: LlmUsage | null = null;

  constructor(options: LlmAgentOptions) {
    this.#options = options;
    this.#url = `${options.baseUrl.replace(/\/+$/, '')}/chat/completions`;
  }

  /** Usage of the latest step that reported one, of any conversation. */
  get lastUsage(): LlmUsage | null {
    return this.#lastUsage;
  }

  /** A conversation's context: its chat messages, one event at a time; each step sends them. */
  context(conversationId: string): AgentContext {
    const transcript = new ChatTranscript({ maxOutputChars: this.#options.maxOutputChars });
    return {
      observe: (event) => transcript.observe(event),
      step: (input) => this.#step(conversationId, transcript.messages, input?.signal),
    };
  }

  async #step(
    conversationId: string,
    messages: readonly ChatMessage[],
    signal: AbortSignal | undefined,
  ): Promise<AgentAction> {
    signal?.throwIfAborted();
    // Serialised now: events observed while the request is out belong to the next step.
    const body = JSON.stringify({ model: this.#options.model, messages, tools: CHAT_TOOLS, tool_choice: 'auto' });
    const completion = await this.#complete(body, signal);
    const action = toAgentAction(completion.choices[0]!.message);
    const usage = this.#record(conversationId, completion);
    return usage
      ? {
          ...action,
          usage: {
            prompt_tokens: usage.promptTokens,
            completion_tokens: usage.completionTokens,
            cost: usage.costUsd ?? 0,
          },
        }
      : action;
  }

  async #complete(body: string, signal: AbortSignal | undefined): Promise<ChatCompletion> {
    const { maxRetries = 3, retryBaseMs = 500 } = this.#options;
    for (let attempt = 0; ; attempt++) {
      const outcome = await this.#attempt(body, signal);
      if (!isTransient(outcome)) return outcome;
      if (attempt >= maxRetries) {
        throw new LlmServerError(outcome.status, attempt + 1, outcome.detail, { cause: outcome.cause });
      }
      try {
        await delay(retryBaseMs * 2 ** attempt, undefined, { signal });
      } catch (err) {
        signal?.throwIfAborted();
        throw err;
      }
    }
  }

  /** One HTTP exchange: a completion, a transient failure, or a thrown final error. */
  async #attempt(body: string, signal: AbortSignal | undefined): Promise<ChatCompletion | Transient> {
    const timeout = AbortSignal.timeout(this.#options.timeoutMs ?? 120_000);
    const fetchFn = this.#options.fetch ?? fetch;
    let text: string;
    let response: Response;
    try {
      response = await fetchFn(this.#url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${this.#options.apiKey}` },
        body,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await response.text();
    } catch (err) {
      signal?.throwIfAborted();
      if (timeout.aborted) return { status: null, detail: 'timed out' };
      const detail = this.#redact(networkDetail(err));
      // An invalid header value is reported with the value itself: such a cause is dropped.
      return { status: null, detail, ...(detail === networkDetail(err) && { cause: err }) };
    }
    if (response.ok) return parseCompletion(text, (t) => this.#redact(t));
    const status = response.status;
    const detail = providerMessage(this.#redact(text));
    if (status === 401 || status === 403) throw new LlmAuthenticationError(status);
    if (status === 429) {
      if (/insufficient_quota/.test(text)) throw new LlmQuotaExceededError(detail);
      throw new LlmRateLimitError(this.#retryAfterMs(response.headers), detail);
    }
    if (status === 408 || status >= 500) return { status, detail };
    throw new LlmRequestError(status, detail);
  }

  /** `retry-after-ms`, else `Retry-After` in seconds or as an HTTP date, else the default. */
  #retryAfterMs(headers: Headers): number {
    const ms = Number(headers.get('retry-after-ms') ?? Number.NaN);
    if (Number.isFinite(ms) && ms >= 0) return Math.ceil(ms);
    const value = headers.get('retry-after')?.trim();
    if (value) {
      if (/^\d+(\.\d+)?$/.test(value)) return Math.ceil(Number(value) * 1000);
      const at = Date.parse(value);
      if (Number.isFinite(at)) return Math.max(0, at - (this.#options.now ?? Date.now)());
    }
    return this.#options.defaultRetryAfterMs ?? 1_000;
  }

  /** A provider may echo what it was sent; the key never leaves this class. */
  #redact(text: string): string {
    const key = this.#options.apiKey;
    return key ? text.split(key).join('[redacted]') : text;
  }

  #record(conversationId: string, completion: ChatCompletion): LlmUsage | undefined {
    if (!completion.usage) return undefined;
    const { prompt_tokens: promptTokens, completion_tokens: completionTokens } = completion.usage;
    const pricing = this.#options.pricing;
    const usage: LlmUsage = {
      conversationId,
      model: this.#options.model,
      promptTokens,
      completionTokens,
      ...(pricing && {
        costUsd:
          (promptTokens * pricing.promptUsdPerMillion + completionTokens * pricing.completionUsdPerMillion) / 1e6,
      }),
    };
    this.#lastUsage = usage;
    this.#options.onUsage?.(usage);
    return usage;
  }
}

export function llmAgent(options: LlmAgentOptions): LlmAgent {
  return new LlmAgent(options);
}

function isTransient(outcome: ChatCompletion | Transient): outcome is Transient {
  return !('choices' in outcome);
}

/** `redact` cleans the body before it is quoted; JSON.parse's own error quotes it raw, so it is not kept. */
function parseCompletion(text: string, redact: (text: string) => string): ChatCompletion {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new LlmResponseError(`the body is not JSON: ${JSON.stringify(clip(redact(text.trim()), 100))}`);
  }
  const parsed = ChatCompletion.safeParse(json);
  if (!parsed.success)
    throw new LlmResponseError('it is not a chat completion with a message', { cause: parsed.error });
  return parsed.data;
}

/** The `error.message` of an OpenAI-style error body, else the start of the body. */
function providerMessage(text: string): string {
  try {
    const json: unknown = JSON.parse(text);
    const error = (json as { error?: unknown })?.error;
    const message = typeof error === 'string' ? error : (error as { message?: unknown } | undefined)?.message;
    if (typeof message === 'string') return clip(message);
  } catch {
    // Not JSON: fall through to the raw text.
  }
  return clip(text.trim());
}

/** fetch says only "fetch failed"; the reason (ECONNREFUSED, a reset) is in its cause. */
function networkDetail(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? err.cause : undefined;
  const code = (cause as { code?: unknown } | undefined)?.code;
  return cause ? `${err.message} (${typeof code === 'string' ? `${code}: ` : ''}${cause.message})` : err.message;
}

function clip(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
