import type { IncomingMessage } from 'node:http';

/**
 * Whether a request comes from another site's page: browsers send `Origin`
 * on every cross-site POST, DELETE and WebSocket handshake, and a page of
 * another site must not act for the user of this one (the default server
 * needs no token, and its scripted agent runs commands). Requests without
 * `Origin` (curl, programs, same-origin GETs) pass.
 */
export function foreignOrigin(req: IncomingMessage): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return false;
  try {
    return new URL(origin).host !== req.headers.host;
  } catch {
    return true;
  }
}
