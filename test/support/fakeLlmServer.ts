import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
}

/**
 * A reply streamed as OpenAI does (`text/event-stream`, `chat.completion.chunk`
 * events): a first chunk with the role, one chunk per delta, the tool call
 * (its arguments in a few pieces), a last chunk with `finish_reason`, a usage
 * chunk when the request asked `stream_options.include_usage` and `usage` is
 * given, then `data: [DONE]`.
 */
export interface StreamScript {
  /** The text deltas, in order (empty strings are sent as they are). */
  deltas: string[];
  /** Pause before each token chunk after the first (delta or tool call piece), default 0. */
  gapMs?: number;
  /** Pause between the response's start (headers and role chunk) and the first token: a model's time to first token, default 0. */
  leadMs?: number;
  usage?: Usage;
  /** Streamed after the text deltas; `finish_reason` is then `tool_calls`. */
  toolCall?: { name: string; args: unknown };
  /** Resets the connection after this many deltas: no finish_reason, no [DONE]. */
  cutAfter?: number;
  /** With `cutAfter`: end the body cleanly instead of resetting the connection. */
  cutCleanly?: boolean;
  /** After this many deltas, an error event saying rate limit (`rate_limit_exceeded`), then the end. */
  rateLimitAfter?: number;
  /** After `after` deltas, an error event `{ error }`, then the end. */
  errorAfter?: { after: number; error: Record<string, unknown> };
}

/** What the fake answers to one request, taken from its queue in order. */
export type FakeReply =
  /** A JSON body (status 200 unless given). */
  | { status?: number; headers?: Record<string, string>; json: unknown }
  /** A raw body, for malformed answers. */
  | { status?: number; headers?: Record<string, string>; raw: string }
  /** Never answers; the request stays open until the client gives up or the server closes. */
  | { hang: true }
  /** Drops the connection without an answer: a network error for the client. */
  | { drop: true }
  /** A streamed answer, whatever the request asked. */
  | { headers?: Record<string, string>; stream: StreamScript };

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body (undefined when it was not JSON). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read whatever the agent sent
  body: any;
  /**
   * When the first token was written: the first delta (or tool call piece) of
   * a stream, the body of any other answer; unset until then, and for `hang`
   * and `drop`. Epoch milliseconds with a fraction (performance.timeOrigin +
   * performance.now()): comparable with Date.now() and across processes.
   */
  firstTokenAt?: number;
  /** The connection closed before the answer was complete: the client went away (an abort), or the script cut it. */
  abandoned: boolean;
}

export interface FakeLlmServerOptions {
  /** Answer 400 "Unrecognized request argument supplied: stream_options" to a request that has them. */
  refuseStreamOptions?: boolean;
  /** What to answer when the queue is empty (instead of 418): a bench's endless supply of replies. */
  reply?: (request: RecordedRequest) => FakeReply;
}

export interface FakeLlmServer {
  /** `http://127.0.0.1:<port>/v1`, the agent's `baseUrl`. */
  readonly baseUrl: string;
  /** Every request received, oldest first. */
  readonly requests: RecordedRequest[];
  /** Resolves when the server has received `count` requests in all. */
  received(count: number): Promise<void>;
  enqueue(...replies: FakeReply[]): void;
  /** See `FakeLlmServerOptions`; may be changed at any time. A refusal takes no reply from the queue. */
  refuseStreamOptions: boolean;
  close(): Promise<void>;
}

/** A completion whose assistant message calls one tool. */
export function toolCall(
  name: string,
  args: unknown,
  usage?: { prompt_tokens: number; completion_tokens: number },
): FakeReply {
  return completion(
    {
      content: null,
      tool_calls: [{ id: 'call_x', type: 'function', function: { name, arguments: JSON.stringify(args) } }],
    },
    usage,
  );
}

/** A completion whose assistant message is plain text. */
export function text(content: string): FakeReply {
  return completion({ content });
}

/** A streamed reply of these text deltas, with `more` of `StreamScript` (a tool call, usage, a cut...). */
export function streamed(deltas: string[], more: Omit<StreamScript, 'deltas'> = {}): FakeReply {
  return { stream: { deltas, ...more } };
}

/** An OpenAI-style error answer. */
export function failure(
  status: number,
  headers: Record<string, string> = {},
  message = `fake failure ${status}`,
  code?: string,
): FakeReply {
  return { status, headers, json: { error: { message, type: 'fake', ...(code && { code }) } } };
}

function completion(
  message: Record<string, unknown>,
  usage?: { prompt_tokens: number; completion_tokens: number },
): FakeReply {
  return {
    json: {
      id: 'chatcmpl-fake',
      object: 'chat.completion',
      model: 'fake-model',
      choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: 'stop' }],
      ...(usage && { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } }),
    },
  };
}

/**
 * A real HTTP server on a free loopback port that speaks just enough of the
 * chat-completions API: POST /v1/chat/completions answers from a queue of
 * scripted replies and records each request. With the queue empty (and no
 * `reply` option) it answers 418, which no agent retries, so a test that asks
 * too often fails loudly.
 */
export async function startFakeLlmServer(options: FakeLlmServerOptions = {}): Promise<FakeLlmServer> {
  const queue: FakeReply[] = [];
  const requests: RecordedRequest[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  const sockets = new Set<Socket>();
  let refuseStreamOptions = options.refuseStreamOptions ?? false;

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body: unknown;
    try {
      body = JSON.parse(raw);
    } catch {
      body = undefined;
    }
    const request: RecordedRequest = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      body,
      abandoned: false,
    };
    requests.push(request);
    res.on('close', () => (request.abandoned = !res.writableFinished));
    for (const waiter of waiters.filter((w) => requests.length >= w.count)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve();
    }
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      return send(res, request, { status: 404, json: { error: { message: `no route ${req.method} ${req.url}` } } });
    }
    const streamOptions = (body as { stream_options?: { include_usage?: unknown } } | undefined)?.stream_options;
    if (refuseStreamOptions && streamOptions !== undefined) {
      return send(res, request, REFUSAL);
    }
    const reply = queue.shift() ??
      options.reply?.(request) ?? {
        status: 418,
        json: { error: { message: 'fake LLM server: no scripted reply left' } },
      };
    if ('hang' in reply) return;
    if ('drop' in reply) return req.socket.destroy();
    if ('stream' in reply) return stream(res, request, reply, streamOptions?.include_usage === true);
    send(res, request, reply);
  };

  const server = createServer((req, res) => {
    void handle(req, res).catch(() => res.destroy());
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    received: (count) =>
      requests.length >= count ? Promise.resolve() : new Promise((resolve) => waiters.push({ count, resolve })),
    enqueue: (...replies) => queue.push(...replies),
    get refuseStreamOptions() {
      return refuseStreamOptions;
    },
    set refuseStreamOptions(refuse) {
      refuseStreamOptions = refuse;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

/** What OpenAI answers to a parameter it does not know. */
const REFUSAL = {
  status: 400,
  json: {
    error: {
      message: 'Unrecognized request argument supplied: stream_options',
      type: 'invalid_request_error',
      param: 'stream_options',
      code: null,
    },
  },
} satisfies FakeReply;

type Answer = Extract<FakeReply, { json: unknown } | { raw: string }>;
type Streamed = Extract<FakeReply, { stream: StreamScript }>;

const now = () => performance.timeOrigin + performance.now();

function send(res: ServerResponse, request: RecordedRequest, reply: Answer): void {
  const payload = 'json' in reply ? JSON.stringify(reply.json) : reply.raw;
  const type = 'json' in reply ? 'application/json' : 'text/plain';
  res.writeHead(reply.status ?? 200, { 'content-type': type, ...reply.headers });
  request.firstTokenAt = now();
  res.end(payload);
}

/** Writes a `StreamScript` at its pace; stops as soon as the client is gone. */
async function stream(res: ServerResponse, request: RecordedRequest, reply: Streamed, includeUsage: boolean) {
  const script = reply.stream;
  /** Resolves once the data has left for the client, so that a cut after it really comes after it. */
  let written = Promise.resolve();
  const event = (data: unknown) => {
    if (res.destroyed || res.writableEnded) return;
    written = new Promise((resolve) => res.write(`data: ${JSON.stringify(data)}\n\n`, () => resolve()));
  };
  const chunk = (choices: unknown[], more: Record<string, unknown> = {}) =>
    event({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model: 'fake-model', choices, ...more });
  const delta = (delta: Record<string, unknown>, finish: string | null = null) =>
    chunk([{ index: 0, delta, logprobs: null, finish_reason: finish }]);
  const closed = new AbortController();
  res.on('close', () => closed.abort());
  let tokens = 0;
  /** Waits the gap before every token but the first; false when the client is gone. */
  const token = async () => {
    const wait = tokens++ > 0 ? script.gapMs : script.leadMs;
    if (wait) await delay(wait, undefined, { signal: closed.signal }).catch(() => {});
    if (res.destroyed) return false;
    request.firstTokenAt ??= now();
    return true;
  };
  const failure =
    script.rateLimitAfter !== undefined ? { after: script.rateLimitAfter, error: RATE_LIMIT } : script.errorAfter;
  /** Ends the answer early if the script says so after `n` deltas. */
  const stopsAfter = async (n: number) => {
    if (n === script.cutAfter) {
      await written;
      if (script.cutCleanly) res.end();
      else res.destroy();
    } else if (n === failure?.after) {
      event({ error: failure.error });
      res.end();
    }
    return res.writableEnded || res.destroyed;
  };

  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...reply.headers });
  delta({ role: 'assistant', content: '', refusal: null });
  for (const [n, content] of script.deltas.entries()) {
    if ((await stopsAfter(n)) || !(await token())) return;
    delta({ content });
  }
  if (await stopsAfter(script.deltas.length)) return;
  if (script.toolCall) {
    const { name, args } = script.toolCall;
    if (!(await token())) return;
    delta({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { name, arguments: '' } }] });
    for (const piece of pieces(JSON.stringify(args), 3)) {
      if (!(await token())) return;
      delta({ tool_calls: [{ index: 0, function: { arguments: piece } }] });
    }
  }
  delta({}, script.toolCall ? 'tool_calls' : 'stop');
  const { usage } = script;
  if (includeUsage && usage) {
    chunk([], { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } });
  }
  if (!res.destroyed) res.end('data: [DONE]\n\n');
}

const RATE_LIMIT = {
  message: 'Rate limit reached for requests',
  type: 'requests',
  param: null,
  code: 'rate_limit_exceeded',
};

function pieces(text: string, count: number): string[] {
  const size = Math.max(1, Math.ceil(text.length / count));
  return Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, (i + 1) * size));
}
