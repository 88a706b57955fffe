/** Structured, one JSON object a line. Never give it secrets: see `maskSecrets`. */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

const ORDER: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3, silent: 4 };

export function jsonLogger(
  level: LogLevel = 'info',
  write: (line: string) => void = (l) => process.stderr.write(l),
): Logger {
  const emit = (lvl: Exclude<LogLevel, 'silent' | 'debug'>, message: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < ORDER[level]) return;
    write(`${JSON.stringify({ ts: new Date().toISOString(), level: lvl, msg: message, ...fields })}\n`);
  };
  return {
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

export function errorFields(err: unknown): { error: string; code?: unknown } {
  if (err instanceof Error) return { error: err.message, code: (err as { code?: unknown }).code };
  return { error: String(err) };
}
