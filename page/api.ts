import type { ConversationPage } from '../protocol/index.ts';

const TOKEN_KEY = 'tether-token';

/**
 * The token: one given as `?token=` is kept (and taken out of the address
 * bar and the history), so the field can change it later; else none.
 */
export function currentToken(): string {
  const url = new URL(location.href);
  const fromUrl = url.searchParams.get('token');
  if (fromUrl !== null) {
    localStorage.setItem(TOKEN_KEY, fromUrl);
    url.searchParams.delete('token');
    history.replaceState(history.state, '', url);
  }
  return localStorage.getItem(TOKEN_KEY) ?? '';
}

export function setToken(token: string): void {
  localStorage.setItem(TOKEN_KEY, token);
}

/** An answer other than 2xx, with the server's error code and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** One REST call to this page's own server, with the token when there is one. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const token = currentToken();
  const response = await fetch(path, {
    method,
    headers: {
      ...(token && { authorization: `Bearer ${token}` }),
      ...(body !== undefined && { 'content-type': 'application/json' }),
    },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  const json: unknown = text ? JSON.parse(text) : undefined;
  if (!response.ok) {
    const error = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiError(response.status, error?.code ?? 'HTTP', error?.message ?? `${response.status}`);
  }
  return json as T;
}

export const listConversations = () => api<ConversationPage>('GET', '/api/conversations?limit=100');
