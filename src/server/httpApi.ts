import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ZodType } from 'zod';
import { errorFields, type Logger } from '../logger.ts';
import {
  ActionBody,
  ClusterQuery,
  ConversationsQuery,
  CreateConversationBody,
  DeleteQuery,
  encodeListCursor,
  EventsQuery,
  ForkBody,
  StateQuery,
  type ConversationPage,
} from '../../protocol/index.ts';
import { BadSeqError } from '../errors.ts';
import type { HostPorts } from './server.ts';
import type { Authenticate } from './auth.ts';
import { BadRequestError, toPublicError } from './errorMapping.ts';
import { allowsHost, foreignHostMessage } from './hostCheck.ts';
import { foreignOrigin } from './origin.ts';
import { PAGE_CSP, type PageAsset } from './pageAssets.ts';

export interface HttpApiOptions extends Omit<HostPorts, 'feed'> {
  logger: Logger;
  maxBodyBytes: number;
  /** Who is calling; null when unauthenticated. */
  authenticate: Authenticate;
  /** Whether the event store is reachable, for `/readyz`. */
  ready?: () => boolean | Promise<boolean>;
  metrics?: { contentType: string; text(): Promise<string> };
  /** The page's built files by name (`index.html`, `app.js`, `style.css`); absent: no page. */
  page?: (name: string) => PageAsset | undefined;
  /**
   * `file:` repository URLs are cloned (a clone by the host reads folders the
   * sandbox hides): for a server of one user, the operator, or when allowed
   * (TETHER_REPO_FILE_URLS). Default: refused.
   */
  fileRepositories?: boolean;
  /** Names a request's `Host` must have (besides loopback ones, see `allowsHost`); absent: any. */
  allowedHosts?: readonly string[];
}

interface Ctx {
  req: IncomingMessage;
  url: URL;
  user: string;
  params: string[];
}
/** A JSON answer, or `text` sent as it is with its own content type, or a file of the page. */
type Answer = { status: number; body?: unknown; text?: { type: string; body: string }; asset?: PageAsset };
type Handler = (ctx: Ctx) => Promise<Answer>;

/** The REST routes of the contract. Parses and routes; the host's commands and queries decide. */
export function httpApi(options: HttpApiOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const { commands, queries } = options;
  const readJson = <T>(req: IncomingMessage, schema: ZodType<T>) =>
    readBody(req, options.maxBodyBytes).then((b) => parseJson(b, schema));
  const asset = (name: string): Answer => {
    const found = options.page?.(name);
    if (!found) throw new BadRequestError('NOT_FOUND', 'the page is not built here: run `npm run build`', 404);
    return { status: 200, asset: found };
  };
  const routes: Array<[method: string, pattern: RegExp, handler: Handler]> = [
    ['GET', /^\/$/, async () => asset('index.html')],
    ['GET', /^\/page\/(app\.js|app\.js\.map|style\.css)$/, async ({ params }) => asset(params[0]!)],
    ['GET', /^\/healthz$/, async () => ({ status: 200, body: { ok: true } })],
    [
      'GET',
      /^\/readyz$/,
      async () =>
        (await (options.ready?.() ?? true))
          ? { status: 200, body: { ready: true } }
          : { status: 503, body: { ready: false, reason: 'the event store (NATS) is not reachable' } },
    ],
    [
      'GET',
      /^\/metrics$/,
      async () => {
        if (!options.metrics) throw new BadRequestError('NOT_FOUND', 'no metrics here', 404);
        return { status: 200, text: { type: options.metrics.contentType, body: await options.metrics.text() } };
      },
    ],
    [
      'GET',
      /^\/api\/cluster$/,
      async ({ user, url }) => {
        const q = ClusterQuery.parse(Object.fromEntries(url.searchParams));
        return {
          status: 200,
          body: q.conversation ? await queries.ownerNode(q.conversation, user) : await queries.cluster(),
        };
      },
    ],
    [
      'POST',
      /^\/api\/conversations$/,
      async ({ req, user }) => ({
        status: 201,
        body: await commands.create(user, checkedFileUrl(await readJson(req, CreateConversationBody), options)),
      }),
    ],
    [
      'GET',
      /^\/api\/conversations$/,
      async ({ user, url }) => {
        const q = ConversationsQuery.parse(Object.fromEntries(url.searchParams));
        const page = await queries.list(user, { limit: q.limit, ...(q.cursor && { after: q.cursor }) });
        const body: ConversationPage = {
          items: page.items,
          next_cursor: page.next === null ? null : encodeListCursor(page.next),
        };
        return { status: 200, body };
      },
    ],
    [
      'GET',
      /^\/api\/conversations\/([^/]+)$/,
      async ({ user, params }) => ({ status: 200, body: await queries.info(params[0]!, user) }),
    ],
    [
      'GET',
      /^\/api\/conversations\/([^/]+)\/events$/,
      async ({ user, params, url }) => {
        const q = EventsQuery.parse(Object.fromEntries(url.searchParams));
        const page = await queries.events(params[0]!, user, { afterSeq: q.after_seq, limit: q.limit });
        return { status: 200, body: { items: page.items, has_more: page.hasMore } };
      },
    ],
    [
      'GET',
      /^\/api\/conversations\/([^/]+)\/state$/,
      async ({ user, params, url }) => {
        const { at_seq } = StateQuery.parse(Object.fromEntries(url.searchParams));
        const atSeq = at_seq === undefined ? undefined : Number(at_seq);
        // Anything but a stream sequence names no event of the conversation.
        if (atSeq !== undefined && !(/^\d+$/.test(at_seq!) && Number.isSafeInteger(atSeq) && atSeq >= 1))
          throw new BadSeqError(params[0]!, JSON.stringify(at_seq));
        return { status: 200, body: await queries.stateAt(params[0]!, user, atSeq) };
      },
    ],
    [
      'POST',
      /^\/api\/conversations\/([^/]+)\/fork$/,
      async ({ req, user, params }) => {
        const body = await readJson(req, ForkBody);
        return { status: 201, body: await commands.fork(params[0]!, user, body.at_seq) };
      },
    ],
    [
      'POST',
      /^\/api\/conversations\/([^/]+)\/actions$/,
      async ({ req, user, params }) => {
        const body = await readJson(req, ActionBody);
        return { status: 202, body: await commands.act(params[0]!, user, body.action, body.client_id) };
      },
    ],
    [
      'POST',
      /^\/api\/conversations\/([^/]+)\/stop$/,
      async ({ user, params }) => {
        await commands.act(params[0]!, user, { type: 'change_agent_state', state: 'stopped' });
        return { status: 200, body: { state: 'stopped' } };
      },
    ],
    [
      'DELETE',
      /^\/api\/conversations\/([^/]+)$/,
      async ({ user, params, url }) => {
        const q = DeleteQuery.parse(Object.fromEntries(url.searchParams));
        await commands.delete(params[0]!, user, q.keep_workspace === 'true');
        return { status: 204 };
      },
    ],
  ];

  const hostAllowed = options.allowedHosts && allowsHost(options.allowedHosts);
  return (req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    void (async () => {
      // Another site's name resolving here (DNS rebinding) reads and changes nothing, whatever the method.
      if (hostAllowed && !PROBE_PATHS.has(url.pathname) && !hostAllowed(req.headers.host))
        throw new BadRequestError('FOREIGN_HOST', foreignHostMessage(req.headers.host), 403);
      const matches = routes.filter(([, pattern]) => pattern.test(url.pathname));
      const route = matches.find(([method]) => method === req.method);
      if (!route) {
        const err = matches.length > 0 ? ['METHOD_NOT_ALLOWED', 405] : ['NOT_FOUND', 404];
        throw new BadRequestError(err[0] as string, `no route for ${req.method} ${url.pathname}`, err[1] as number);
      }
      // Another site's page may read nothing and change nothing here (its GETs are refused by CORS).
      if (req.method !== 'GET' && req.method !== 'HEAD' && foreignOrigin(req))
        throw new BadRequestError('FOREIGN_ORIGIN', `requests from ${req.headers.origin} are refused`, 403);
      // Health checks and metrics answer without a token, so load balancers, orchestrators and scrapers can probe.
      const user = PUBLIC_PATHS.has(url.pathname) ? 'anonymous' : await options.authenticate(req, url);
      if (user === null) throw new BadRequestError('UNAUTHENTICATED', 'a valid token is required', 401);
      const params = (route[1].exec(url.pathname) ?? []).slice(1).map(decodeURIComponent);
      return route[2]({ req, url, user, params });
    })().then(
      (result) =>
        result.asset
          ? sendAsset(res, result.asset)
          : result.text
            ? sendText(res, result.status, result.text)
            : send(res, result.status, result.body),
      (err: unknown) => {
        const pub = toPublicError(err);
        if (pub.status >= 500) options.logger.error('request failed', { path: url.pathname, ...errorFields(err) });
        send(res, pub.status, { error: { code: pub.code, message: pub.message } });
      },
    );
  };
}

// Probes come from load balancers, orchestrators and scrapers under any name (`tether-1:3000`); they hold no
// conversation data and change nothing, so they answer whatever the Host.
const PROBE_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

// /metrics holds counts only (no id, user or content): a scraper needs no token. The page's
// files hold no data (it asks for a token itself).
const PUBLIC_PATHS = new Set([
  '/healthz',
  '/readyz',
  '/metrics',
  '/',
  '/page/app.js',
  '/page/app.js.map',
  '/page/style.css',
]);

function sendAsset(res: ServerResponse, asset: PageAsset): void {
  if (res.headersSent) return;
  res.writeHead(200, {
    'content-type': asset.type,
    'content-length': asset.body.length,
    'content-security-policy': PAGE_CSP,
    'x-content-type-options': 'nosniff',
    // Tokens may travel in the page's URL (`?token=`): never in a Referer.
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-cache',
  });
  res.end(asset.body);
}

function sendText(res: ServerResponse, status: number, text: { type: string; body: string }): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': text.type, 'content-length': Buffer.byteLength(text.body) });
  res.end(text.body);
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (res.headersSent) return;
  if (body === undefined) {
    res.writeHead(status).end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    // Past the limit the rest is drained, not kept, so the 413 answer still reaches the client.
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size > limit) {
        over = true;
        chunks.length = 0;
        reject(new BadRequestError('BODY_TOO_LARGE', `request body over ${limit} bytes`, 413));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parseJson<T>(text: string, schema: ZodType<T>): T {
  let value: unknown;
  try {
    value = text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    throw new BadRequestError('BAD_JSON', 'the request body is not valid JSON');
  }
  return schema.parse(value);
}

/** A body whose repository is a `file:` URL, on a server that does not clone them, is a 400. */
function checkedFileUrl(body: CreateConversationBody, options: HttpApiOptions): CreateConversationBody {
  const url = body.repository && URL.parse(body.repository.url);
  if (url?.protocol !== 'file:' || options.fileRepositories) return body;
  throw new BadRequestError(
    'BAD_REQUEST',
    'repository.url: file URLs are cloned only by a server without tokens, or with TETHER_REPO_FILE_URLS=allow',
  );
}
