import type { IncomingMessage } from 'node:http';
import { jwtVerify } from 'jose';

/** Who is calling, or null when the caller must be refused (401 / close 4001). */
export type Authenticate = (req: IncomingMessage, url: URL) => Promise<string | null>;

export interface AuthOptions {
  /** token → user (`TETHER_TOKENS=token:user,...`). */
  tokens?: ReadonlyMap<string, string>;
  /** HS256 secret (`TETHER_JWT_SECRET`): a valid JWT's `sub` is the user. */
  jwtSecret?: string;
}

/**
 * With neither tokens nor a JWT secret, every caller is user `local`.
 * Otherwise a token is required, from `Authorization: Bearer <token>` or, for
 * browsers (which cannot set headers on a WebSocket), `?token=<token>`.
 */
export function authenticator(options: AuthOptions): Authenticate {
  const tokens = options.tokens ?? new Map<string, string>();
  const key = options.jwtSecret ? new TextEncoder().encode(options.jwtSecret) : undefined;
  if (tokens.size === 0 && !key) return async () => 'local';
  return async (req, url) => {
    const token = bearer(req) ?? url.searchParams.get('token');
    if (!token) return null;
    const user = tokens.get(token);
    if (user !== undefined) return user;
    if (!key) return null;
    try {
      const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'] });
      return typeof payload.sub === 'string' && payload.sub.length > 0 ? payload.sub : null;
    } catch {
      return null;
    }
  };
}

function bearer(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  const match = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  return match?.[1];
}

/** Parses `token:user,token:user`; throws on a malformed entry. */
export function parseTokens(spec: string | undefined): Map<string, string> {
  const tokens = new Map<string, string>();
  for (const entry of (spec ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const at = entry.indexOf(':');
    if (at <= 0 || at === entry.length - 1) throw new Error(`TETHER_TOKENS: "${entry.slice(0, 3)}…" is not token:user`);
    tokens.set(entry.slice(0, at), entry.slice(at + 1));
  }
  return tokens;
}
