/** Structured, one JSON object a line. Never give it secrets: see `maskingLogger` (src/conversation/secretMasker.ts). */
export interface Logger {
  /**
   * True when debug lines are written. Check it before building a debug
   * line's fields on a hot path, so other levels pay nothing for them.
   */
  readonly isDebug: boolean;
  /** What a developer needs to follow a session step by step (decisions, appends, effects). */
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

const ORDER: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3, silent: 4 };

let stderrGone = false;

/**
 * Writes to stderr until it fails once (EPIPE: whoever read it went away),
 * then drops the lines. Without this, the failed write is an uncaught error,
 * logging it fails again, and the process spins on it for ever.
 */
function writeStderr(line: string): void {
  if (stderrGone) return;
  if (process.stderr.listenerCount('error') === 0) process.stderr.on('error', () => (stderrGone = true));
  process.stderr.write(line);
}

export function jsonLogger(level: LogLevel = 'info', write: (line: string) => void = writeStderr): Logger {
  const emit = (lvl: Exclude<LogLevel, 'silent'>, message: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < ORDER[level]) return;
    write(`${JSON.stringify({ ts: new Date().toISOString(), level: lvl, msg: message, ...fields })}\n`);
  };
  return {
    isDebug: level === 'debug',
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}

export const silentLogger: Logger = { isDebug: false, debug() {}, info() {}, warn() {}, error() {} };

export function errorFields(err: unknown): { error: string; code?: unknown } {
  if (err instanceof Error) return { error: err.message, code: (err as { code?: unknown }).code };
  return { error: String(err) };
}
