import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** What the fake answers to one request, taken from its queue in order. */
export type FakeReply =
  /** A JSON body (status 200 unless given). */
  | { status?: number; headers?: Record<string, string>; json: unknown }
  /** A raw body, for malformed answers. */
  | { status?: number; headers?: Record<string, string>; raw: string }
  /** Never answers; the request stays open until the client gives up or the server closes. */
  | { hang: true }
  /** Drops the connection without an answer: a network error for the client. */
  | { drop: true };

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body (undefined when it was not JSON). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read whatever the agent sent
  body: any;
}

export interface FakeLlmServer {
  /** `http://127.0.0.1:<port>/v1`, the agent's `baseUrl`. */
  readonly baseUrl: string;
  /** Every request received, oldest first. */
  readonly requests: RecordedRequest[];
  /** Resolves when the server has received `count` requests in all. */
  received(count: number): Promise<void>;
  enqueue(...replies: FakeReply[]): void;
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
 * scripted replies and records each request. With the queue empty it answers
 * 418, which no agent retries, so a test that asks too often fails loudly.
 */
export async function startFakeLlmServer(): Promise<FakeLlmServer> {
  const queue: FakeReply[] = [];
  const requests: RecordedRequest[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  const sockets = new Set<Socket>();

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
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
    for (const waiter of waiters.filter((w) => requests.length >= w.count)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve();
    }
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      return send(res, { status: 404, json: { error: { message: `no route ${req.method} ${req.url}` } } });
    }
    const reply = queue.shift() ?? {
      status: 418,
      json: { error: { message: 'fake LLM server: no scripted reply left' } },
    };
    if ('hang' in reply) return;
    if ('drop' in reply) return req.socket.destroy();
    send(res, reply);
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
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

function send(res: ServerResponse, reply: Exclude<FakeReply, { hang: true } | { drop: true }>): void {
  const payload = 'json' in reply ? JSON.stringify(reply.json) : reply.raw;
  const type = 'json' in reply ? 'application/json' : 'text/plain';
  res.writeHead(reply.status ?? 200, { 'content-type': type, ...reply.headers });
  res.end(payload);
}
