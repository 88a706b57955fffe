// How the bench's Tether servers know their callers: each conversation has a
// user of its own, named by a header (REST) or a query parameter (WebSocket).
import type { IncomingMessage } from 'node:http';

const USER_HEADER = 'x-bench-user';
/** The query parameter naming the caller on the WebSocket. */
export const USER_PARAM = 'bench_user';

/** The bench servers' `authenticate`: the named user, else `local`. */
export const benchAuthenticate = async (req: IncomingMessage, url: URL): Promise<string> =>
  url.searchParams.get(USER_PARAM) ?? (req.headers[USER_HEADER] as string | undefined) ?? 'local';

/** A JSON REST call as `user`: GET without a body, POST with one; throws on a non-2xx answer. */
export async function http<T>(base: string, user: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${base}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { [USER_HEADER]: user, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}
