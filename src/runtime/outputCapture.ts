import { randomBytes } from 'node:crypto';

const MARKER_PREFIX = '__tether_';
const EMPTY = Buffer.alloc(0);

/**
 * Run once in a fresh shell, before any command. `__tether_end` prints a command's end
 * marker. On SIGINT during a command, the INT trap leaves every loop and installs a
 * DEBUG trap that skips each further command until `__tether_end`, so a timeout aborts
 * the whole command line (like Ctrl-C in a terminal) while cwd and variables survive;
 * `set -e` is paused meanwhile so the skipping does not exit the shell. A SIGINT
 * between commands does nothing (`__tether_busy` is empty).
 */
export const SHELL_PRELUDE = `exec 2>&1
__tether_end() { __tether_busy=; printf '\\n%s%s:%d\\n' ${MARKER_PREFIX} "$1" "$2"; }
__tether_abort() {
  case $- in *e*) __tether_errexit=1; set +e ;; esac
  shopt -s extdebug
  trap 'if [[ -z \${__tether_busy-} || $BASH_COMMAND == __tether_end* || \${FUNCNAME[0]-} == __tether_end ]]; then __tether_resume; else break 1000 2>/dev/null; false; fi' DEBUG
}
__tether_resume() {
  trap - DEBUG
  shopt -u extdebug
  if [[ -n \${__tether_errexit-} ]]; then __tether_errexit=; set -e; fi
}
trap 'if [[ -n \${__tether_busy-} ]]; then __tether_abort; break 1000 2>/dev/null; fi' INT
`;

/**
 * One command's output, captured from a shell that runs many: it builds the line
 * that runs the command and ends it with a random marker, then keeps the head of
 * what comes back (at most `cap` bytes) until that marker and the exit code show up.
 * Memory stays under the cap plus one chunk plus the marker, whatever the command prints.
 *
 * The shell gets `__tether_busy=1; eval $'<command>' </dev/null; __tether_end <hex> "$?"`
 * and prints `\n__tether_<hex>:<exit code>\n` at the end. The command is data to eval,
 * so a syntax error, an open quote or a heredoc cannot swallow the marker; the leading
 * `\n` ends output that lacks a final newline and is removed again with the marker; the
 * marker is new for every command and never appears whole in the line, so echoing the
 * line (`set -v`, `set -x`) does not produce it.
 */
export class OutputCapture {
  readonly line: string;
  private readonly needle: Buffer;
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  private pending = EMPTY;
  private truncated = false;

  constructor(
    command: string,
    private readonly cap: number,
    marker: string = randomBytes(16).toString('hex'),
  ) {
    this.needle = Buffer.from(`\n${MARKER_PREFIX}${marker}:`);
    this.line = `__tether_busy=1; eval ${ansiCQuote(command)} </dev/null; __tether_end ${marker} "$?"\n`;
  }

  /**
   * Feeds shell output; returns the exit code once the end marker is complete.
   * Chunks are kept as they come (no copy); only a possible start of the marker at
   * the end of a chunk is held back, and joined with the next chunk only when that
   * chunk goes on with the marker.
   */
  push(chunk: Buffer): number | undefined {
    let data = chunk;
    if (this.pending.length > 0) {
      const rest = this.needle.subarray(this.pending.length);
      const n = Math.min(rest.length, chunk.length);
      if (chunk.subarray(0, n).equals(rest.subarray(0, n))) data = Buffer.concat([this.pending, chunk]);
      else this.keep(this.pending);
      this.pending = EMPTY;
    }
    const at = data.indexOf(this.needle);
    if (at < 0) {
      const held = markerStartAtEnd(data, this.needle);
      this.keep(data.subarray(0, data.length - held));
      this.pending = Buffer.from(data.subarray(data.length - held));
      return undefined;
    }
    this.keep(data.subarray(0, at));
    const end = data.indexOf(0x0a, at + this.needle.length);
    if (end < 0) {
      this.pending = Buffer.from(data.subarray(at));
      return undefined;
    }
    this.pending = EMPTY;
    return Number.parseInt(data.subarray(at + this.needle.length, end).toString(), 10);
  }

  /** The output so far; what was held back as a possible marker start counts as output. */
  finish(): { output: string; truncated: boolean } {
    this.keep(this.pending);
    this.pending = EMPTY;
    const bytes = Buffer.concat(this.head);
    // A streaming decode drops a character the cap cut in half instead of mangling it.
    // One decode of the joined bytes makes one flat string: a short-lived buffer
    // is freed sooner than the copy that serialising a string of parts would make.
    const output = new TextDecoder().decode(bytes, { stream: this.truncated });
    return { output, truncated: this.truncated };
  }

  private keep(part: Buffer): void {
    const room = this.cap - this.headBytes;
    if (part.length > room) this.truncated = true;
    if (room <= 0 || part.length === 0) return;
    const taken = part.subarray(0, room);
    this.head.push(taken);
    this.headBytes += taken.length;
  }
}

/** The length of the longest end of `data` that is a beginning of `needle` (which starts with a newline). */
function markerStartAtEnd(data: Buffer, needle: Buffer): number {
  for (let i = Math.max(0, data.length - needle.length + 1); i < data.length; i++) {
    if (data[i] === needle[0] && data.subarray(i).equals(needle.subarray(0, data.length - i))) return data.length - i;
  }
  return 0;
}

/** Quotes any string as one bash word: `$'...'` with escapes for quotes, backslashes and control bytes. */
export function ansiCQuote(text: string): string {
  // eslint-disable-next-line no-control-regex -- control bytes are exactly what must be escaped
  const body = text.replace(/[\\'\x00-\x1f\x7f]/g, (c) =>
    c === '\\' || c === "'" ? `\\${c}` : `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`,
  );
  return `$'${body}'`;
}
