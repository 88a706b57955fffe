import { z } from 'zod';
import { clip, LlmRateLimitError, LlmResponseError, LlmServerError } from './llmErrors.ts';
import type { AssistantReply } from './llmMessages.ts';

/** Token counts as chat-completions endpoints report them. */
export interface TokenCounts {
  prompt_tokens: number;
  completion_tokens: number;
}

/** A whole streamed reply: `content` is its text deltas joined, exactly. */
export interface StreamedReply {
  reply: AssistantReply & { content: string };
  usage: TokenCounts | null;
}

export interface ChatStreamOptions {
  /** Each non-empty text delta, at once. */
  onDelta?: (text: string) => void;
  /** Checked before each delta: a delta is never reported after an abort. */
  signal?: AbortSignal;
  /** Cleans what the provider wrote before an error quotes it. */
  redact: (text: string) => string;
  /** The wait proposed by a rate-limit error event (it has no Retry-After). */
  retryAfterMs: number;
}

const ToolCallDelta = z.object({
  index: z.number().int().min(0).nullish(),
  id: z.string().nullish(),
  function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
});
const Chunk = z.object({
  choices: z
    .array(
      z.object({
        delta: z.object({ content: z.string().nullish(), tool_calls: z.array(ToolCallDelta).nullish() }).nullish(),
        finish_reason: z.string().nullish(),
      }),
    )
    .nullish(),
  // Some servers send partial or null usage on every chunk: only a complete one counts.
  usage: z.object({ prompt_tokens: z.number(), completion_tokens: z.number() }).nullish().catch(null),
});

interface ToolCallParts {
  id: string;
  name: string;
  arguments: string;
}

/**
 * Splits a `text/event-stream` into the data of its events, by the SSE rules:
 * a field per line (`\n`, `\r\n` or `\r`), `data` lines joined by `\n`, an event
 * ended by a blank line; comments (`:`) and other fields are skipped. Text may
 * be pushed in pieces cut anywhere.
 */
export class SseParser {
  #partial = '';
  #data: string[] = [];
  /** The last piece ended in `\r`: a `\n` starting the next one belongs to that line break. */
  #afterCr = false;

  /** The data of every event that `text` completes. */
  push(text: string): string[] {
    if (this.#afterCr && text.startsWith('\n')) text = text.slice(1);
    this.#afterCr = text.endsWith('\r');
    const lines = (this.#partial + text).split(/\r\n|\r|\n/);
    this.#partial = lines.pop() ?? '';
    return lines.flatMap((line) => this.#line(line));
  }

  /** At the end of the stream: the last line and an event missing its blank line still count. */
  end(): string[] {
    const last = this.#partial ? this.#line(this.#partial) : [];
    this.#partial = '';
    return [...last, ...this.#line('')];
  }

  #line(line: string): string[] {
    if (line === '') {
      const data = this.#data;
      this.#data = [];
      return data.length > 0 ? [data.join('\n')] : [];
    }
    if (line.startsWith('data:')) this.#data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    return [];
  }
}

/** `request` (a JSON object) with `fields` added at its end. */
function withFields(request: string, fields: Record<string, unknown>): string {
  return `${request.slice(0, -1)},${JSON.stringify(fields).slice(1)}`;
}

/** The serialised `request` asking for a stream, with usage at its end when `withUsage`. */
export function streamRequest(request: string, withUsage: boolean): string {
  return withFields(request, withUsage ? { stream: true, stream_options: { include_usage: true } } : { stream: true });
}

/**
 * Whether a refused request was refused for its `stream_options` (see
 * `LlmAgentOptions.stream`): narrow, and a wrong guess costs one more request,
 * not a failure.
 */
export function refusesStreamOptions(status: number, body: string): boolean {
  if (status < 400 || status >= 500 || status === 401 || status === 403 || status === 429) return false;
  if (/stream_options/i.test(body)) return true;
  return (
    (status === 400 || status === 422) &&
    /\b(unknown|unrecogni[sz]ed|unsupported|unexpected)\b[^.\n]{0,40}?\b(parameter|argument|field|property|key)s?\b|extra inputs are not permitted|extra_forbidden/i.test(
      body,
    )
  );
}

/** Whether a body read whole (not sent as `text/event-stream`) is an event stream all the same. */
export function looksLikeEventStream(text: string): boolean {
  return /^\s*(data:|:)/.test(text);
}

/**
 * One chat-completions stream, put together chunk by chunk: text deltas are
 * reported at once and joined, tool calls gathered by `index`, usage taken
 * from the chunk that carries it (the last, with `include_usage`). An error
 * event becomes `LlmRateLimitError` when its code, type or status says rate
 * limit (`rate_limit_exceeded`, 429), else `LlmServerError` (`server_error`).
 */
export class ChatStream {
  readonly #options: ChatStreamOptions;
  readonly #sse = new SseParser();
  readonly #calls: ToolCallParts[] = [];
  #text = '';
  #usage: TokenCounts | null = null;
  #finished = false;
  #done = false;

  constructor(options: ChatStreamOptions) {
    this.#options = options;
  }

  /** Reads the next piece of the body; false once `[DONE]` came (the rest is not read). */
  push(text: string): boolean {
    for (const data of this.#sse.push(text)) if (!this.#event(data)) return false;
    return true;
  }

  /** The reply, at the end of the body: cut short (`stream_cut`) without `[DONE]` or a `finish_reason`. */
  end(): StreamedReply {
    if (!this.#done) for (const data of this.#sse.end()) if (!this.#event(data)) break;
    if (!this.#done && !this.#finished) {
      throw new LlmServerError('stream_cut', null, 'the stream ended without [DONE] or a finish_reason');
    }
    const calls = this.#calls.filter(Boolean);
    const reply = {
      content: this.#text,
      ...(calls.length > 0 && {
        tool_calls: calls.map((call) => ({ id: call.id, function: { name: call.name, arguments: call.arguments } })),
      }),
    };
    return { reply, usage: this.#usage };
  }

  #event(data: string): boolean {
    if (this.#done) return false;
    const trimmed = data.trim();
    if (trimmed === '[DONE]') {
      this.#done = true;
      return false;
    }
    if (trimmed === '') return true;
    let json: unknown;
    try {
      json = JSON.parse(trimmed);
    } catch {
      throw new LlmResponseError(
        `a stream event is not JSON: ${JSON.stringify(clip(this.#options.redact(trimmed), 100))}`,
      );
    }
    const error = (json as { error?: unknown } | null)?.error;
    if (error !== undefined && error !== null) throw this.#failure(error);
    const chunk = Chunk.safeParse(json);
    if (!chunk.success)
      throw new LlmResponseError('a stream event is not a chat completion chunk', { cause: chunk.error });
    this.#chunk(chunk.data);
    return true;
  }

  #chunk(chunk: z.infer<typeof Chunk>): void {
    if (chunk.usage) this.#usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (!choice) return;
    if (choice.finish_reason) this.#finished = true;
    const text = choice.delta?.content;
    if (text) {
      this.#options.signal?.throwIfAborted();
      this.#text += text;
      this.#options.onDelta?.(text);
    }
    for (const part of choice.delta?.tool_calls ?? []) {
      const call = (this.#calls[this.#slot(part)] ??= { id: '', name: '', arguments: '' });
      if (part.id && !call.id) call.id = part.id;
      call.name += part.function?.name ?? '';
      call.arguments += part.function?.arguments ?? '';
    }
  }

  /** A call's `index`; a server that leaves it out starts a new call with a new id, else goes on with the last. */
  #slot(part: z.infer<typeof ToolCallDelta>): number {
    if (typeof part.index === 'number') return part.index;
    const last = this.#calls.length - 1;
    if (last < 0) return 0;
    return part.id && this.#calls[last]?.id && part.id !== this.#calls[last]?.id ? last + 1 : last;
  }

  #failure(error: unknown): Error {
    const fields = typeof error === 'object' ? (error as Record<string, unknown>) : {};
    const message = typeof error === 'string' ? error : fields.message;
    const detail = typeof message === 'string' ? clip(this.#options.redact(message)) : '';
    const says = (value: unknown) =>
      value === 429 || value === '429' || (typeof value === 'string' && /rate.?limit/i.test(value));
    if (says(fields.code) || says(fields.type) || says(fields.status) || (typeof error === 'string' && says(error))) {
      return new LlmRateLimitError(this.#options.retryAfterMs, detail);
    }
    return new LlmServerError('server_error', null, detail);
  }
}

/**
 * Reads a streamed answer to its end (or its `[DONE]`) and gives the reply. A
 * failed read goes through `readFailed`, which says what it means (an abort, a
 * timeout, a cut). The body is released however this ends.
 */
export async function readChatStream(
  body: ReadableStream<Uint8Array> | null,
  options: ChatStreamOptions & { readFailed: (err: unknown) => Error },
): Promise<StreamedReply> {
  const stream = new ChatStream(options);
  if (!body) return stream.end();
  const reader = body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        throw options.readFailed(err);
      }
      if (chunk.done) {
        stream.push(decoder.decode());
        return stream.end();
      }
      if (!stream.push(decoder.decode(chunk.value, { stream: true }))) return stream.end();
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}
