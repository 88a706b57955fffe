import type { Agent, AgentAction, AgentContext, AgentStepInput } from './agent.ts';
import { ChatTranscript } from './chatTranscript.ts';
import {
  LlmAuthenticationError,
  LlmQuotaExceededError,
  LlmRateLimitError,
  LlmRequestError,
  LlmServerError,
  clip,
} from './llmErrors.ts';
import {
  chatTools,
  parseCompletion,
  toAgentAction,
  toStreamedAction,
  type ChatMessage,
  type ListedServers,
} from './llmMessages.ts';
import {
  ChatStream,
  looksLikeEventStream,
  readChatStream,
  refusesStreamOptions,
  streamRequest,
  type TokenCounts,
} from './llmStream.ts';

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
  /**
   * Stream the reply (default true): `stream: true` with `stream_options:
   * { include_usage: true }`, each text delta handed to `onDelta` as it comes.
   * An endpoint that refuses `stream_options` is asked again at once without
   * them, and this agent does not send them again once that worked (its usage
   * is then unknown). The refusal is a 4xx other than 401, 403 and 429 whose
   * body names `stream_options`, or a 400 or 422 whose body speaks of an
   * unknown, unrecognized, unsupported or unexpected parameter (argument,
   * field, property, key) or of extra inputs not permitted. An endpoint that
   * answers JSON all the same is read as a whole, its text one delta. With
   * false, one plain completion per step.
   */
  stream?: boolean;
  /** Limit of one HTTP exchange, the whole body or stream included (default 120 s). */
  timeoutMs?: number;
  /** Wait proposed after a 429 without a Retry-After header, or a rate-limit error in a stream (default 1000 ms). */
  defaultRetryAfterMs?: number;
  maxOutputChars?: number;
  pricing?: LlmPricing;
  /** Called once per successful step with usage; it must not throw. */
  onUsage?: (usage: LlmUsage) => void;
  fetch?: typeof fetch;
  /** Clock for Retry-After dates. */
  now?: () => number;
}

/** An action and what the endpoint said it cost. */
interface Answer {
  action: AgentAction;
  usage: TokenCounts | null | undefined;
}

/** One HTTP exchange under way: its answer and the timeout that also bounds reading the body. */
interface Exchange {
  response: Response;
  timeout: AbortSignal;
}

/**
 * An Agent backed by any OpenAI-compatible chat-completions endpoint, with
 * function calling. One step is one completion and one HTTP exchange, never
 * retried here: a 5xx, a timeout, a network failure or a cut stream is thrown
 * at once as `LlmServerError` (with its `reason`), a 429 as `LlmRateLimitError`,
 * and the session tries the step again as a new attempt. `signal` aborts the
 * request and the reading of the stream at once.
 */
export class LlmAgent implements Agent {
  readonly #options: LlmAgentOptions;
  readonly #url: string;
  #lastUsage: LlmUsage | null = null;
  /** Whether to ask for usage in the stream: false once the endpoint refused `stream_options`. */
  #streamOptions = true;

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
      step: (input) => this.#step(conversationId, transcript.messages, transcript.servers, input),
    };
  }

  async #step(
    conversationId: string,
    messages: readonly ChatMessage[],
    servers: ListedServers,
    input: AgentStepInput | undefined,
  ): Promise<AgentAction> {
    input?.signal?.throwIfAborted();
    // Serialised now: events observed while the request is out belong to the next step.
    const tools = chatTools(servers);
    const request = JSON.stringify({ model: this.#options.model, messages, tools, tool_choice: 'auto' });
    const { action, usage } =
      (this.#options.stream ?? true)
        ? await this.#streamed(request, input ?? {})
        : await this.#plain(request, input?.signal);
    const recorded = usage ? this.#record(conversationId, usage) : undefined;
    return recorded
      ? {
          ...action,
          usage: {
            prompt_tokens: recorded.promptTokens,
            completion_tokens: recorded.completionTokens,
            cost: recorded.costUsd ?? 0,
          },
        }
      : action;
  }

  /** One plain completion, read whole. */
  async #plain(request: string, signal: AbortSignal | undefined): Promise<Answer> {
    const exchange = await this.#post(request, signal);
    if (!exchange.response.ok) throw await this.#failure(exchange, signal);
    const completion = parseCompletion(await this.#body(exchange, signal), (t) => this.#redact(t));
    return { action: toAgentAction(completion.choices[0]!.message), usage: completion.usage };
  }

  /** One streamed completion, asked again at once without `stream_options` if the endpoint refuses them. */
  async #streamed(request: string, { signal, onDelta }: AgentStepInput): Promise<Answer> {
    const withOptions = this.#streamOptions;
    let exchange = await this.#post(streamRequest(request, withOptions), signal);
    if (withOptions && !exchange.response.ok) {
      const text = await this.#errorText(exchange, signal);
      if (!refusesStreamOptions(exchange.response.status, text)) throw this.#failureOf(exchange.response, text);
      exchange = await this.#post(streamRequest(request, false), signal);
      if (exchange.response.ok) this.#streamOptions = false;
    }
    if (!exchange.response.ok) throw await this.#failure(exchange, signal);
    const options = {
      onDelta,
      signal,
      redact: (text: string) => this.#redact(text),
      retryAfterMs: this.#options.defaultRetryAfterMs ?? 1_000,
    };
    if (/text\/event-stream/i.test(exchange.response.headers.get('content-type') ?? '')) {
      const streamed = await readChatStream(exchange.response.body, {
        ...options,
        readFailed: (err) => this.#cut(err, exchange, signal),
      });
      return { action: toStreamedAction(streamed.reply), usage: streamed.usage };
    }
    const text = await this.#body(exchange, signal);
    if (looksLikeEventStream(text)) {
      const stream = new ChatStream(options);
      stream.push(text);
      const streamed = stream.end();
      return { action: toStreamedAction(streamed.reply), usage: streamed.usage };
    }
    // The endpoint ignored `stream`: its whole text, as a plain completion gives it, is the one delta.
    const completion = parseCompletion(text, options.redact);
    const { message } = completion.choices[0]!;
    const whole = message.content?.trim() ?? '';
    const action = toStreamedAction({ ...message, content: whole });
    // Cut meanwhile: no delta, but the answer (and what it used) is still handed back.
    if (whole && !signal?.aborted) onDelta?.(whole);
    return { action, usage: completion.usage };
  }

  /** Sends one request; no answer at all is `LlmServerError` (`network`). */
  async #post(body: string, signal: AbortSignal | undefined): Promise<Exchange> {
    const timeout = AbortSignal.timeout(this.#options.timeoutMs ?? 120_000);
    const fetchFn = this.#options.fetch ?? fetch;
    try {
      const response = await fetchFn(this.#url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${this.#options.apiKey}` },
        body,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      return { response, timeout };
    } catch (err) {
      signal?.throwIfAborted();
      if (timeout.aborted) throw new LlmServerError('network', null, 'timed out');
      throw this.#networkError('network', err);
    }
  }

  /** A 2xx body read whole; a body that breaks off is `LlmServerError` (`stream_cut`). */
  async #body(exchange: Exchange, signal: AbortSignal | undefined): Promise<string> {
    try {
      return await exchange.response.text();
    } catch (err) {
      throw this.#cut(err, exchange, signal);
    }
  }

  /** What a failed read of a 2xx body means: the caller's abort, else a cut answer. */
  #cut(err: unknown, exchange: Exchange, signal: AbortSignal | undefined): Error {
    signal?.throwIfAborted();
    if (exchange.timeout.aborted) return new LlmServerError('stream_cut', null, 'timed out while reading the answer');
    return this.#networkError('stream_cut', err);
  }

  #networkError(reason: 'network' | 'stream_cut', err: unknown): LlmServerError {
    const detail = this.#redact(networkDetail(err));
    // An invalid header value is reported with the value itself: such a cause is dropped.
    return new LlmServerError(reason, null, detail, detail === networkDetail(err) ? { cause: err } : undefined);
  }

  /** The body of a failed answer; one that cannot be read is empty (its status says enough). */
  async #errorText(exchange: Exchange, signal: AbortSignal | undefined): Promise<string> {
    const text = await exchange.response.text().catch(() => '');
    signal?.throwIfAborted();
    return text;
  }

  async #failure(exchange: Exchange, signal: AbortSignal | undefined): Promise<Error> {
    return this.#failureOf(exchange.response, await this.#errorText(exchange, signal));
  }

  /** The error of a non-2xx answer. */
  #failureOf(response: Response, text: string): Error {
    const status = response.status;
    const detail = providerMessage(this.#redact(text));
    if (status === 401 || status === 403) return new LlmAuthenticationError(status);
    if (status === 429) {
      if (/insufficient_quota/.test(text)) return new LlmQuotaExceededError(detail);
      return new LlmRateLimitError(this.#retryAfterMs(response.headers), detail);
    }
    if (status === 408 || status >= 500) return new LlmServerError('server_error', status, detail);
    return new LlmRequestError(status, detail);
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

  #record(conversationId: string, counts: TokenCounts): LlmUsage {
    const { prompt_tokens: promptTokens, completion_tokens: completionTokens } = counts;
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
