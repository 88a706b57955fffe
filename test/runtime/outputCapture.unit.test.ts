import { describe, expect, it } from 'vitest';
import { ansiCQuote, OutputCapture } from '../../src/runtime/outputCapture.ts';

const MARKER = 'feedc0de';
const END = `\n__tether_${MARKER}:7\n`;

function feed(capture: OutputCapture, ...chunks: string[]): number | undefined {
  let code: number | undefined;
  for (const chunk of chunks) code = capture.push(Buffer.from(chunk)) ?? code;
  return code;
}

describe('OutputCapture', () => {
  it('writes a line that evals the quoted command with empty stdin and then prints the marker', () => {
    const capture = new OutputCapture("echo 'hi'", 100, MARKER);
    expect(capture.line).toBe(`__tether_busy=1; eval $'echo \\'hi\\'' </dev/null; __tether_end ${MARKER} "$?"\n`);
  });

  it('finds the marker wherever the chunks split it and returns output and exit code', () => {
    const stream = `hello\nworld${END}`;
    for (let cut = 0; cut <= stream.length; cut++) {
      const capture = new OutputCapture('x', 100, MARKER);
      expect(feed(capture, stream.slice(0, cut), stream.slice(cut))).toBe(7);
      expect(capture.finish()).toEqual({ output: 'hello\nworld', truncated: false });
    }
  });

  it('keeps output that only looks like the start of the marker, however three chunks split it', () => {
    const output = `a\n\n__tether_\n__tether_feed\n`;
    const stream = `${output}z${END}`;
    for (let first = 0; first <= stream.length; first++) {
      for (let second = first; second <= stream.length; second++) {
        const capture = new OutputCapture('x', 100, MARKER);
        expect(feed(capture, stream.slice(0, first), stream.slice(first, second), stream.slice(second))).toBe(7);
        expect(capture.finish()).toEqual({ output: `${output}z`, truncated: false });
      }
    }
  });

  it('waits for the end of the marker line before returning the exit code', () => {
    const capture = new OutputCapture('x', 100, MARKER);
    expect(feed(capture, `out\n__tether_${MARKER}:12`)).toBeUndefined();
    expect(feed(capture, '3\n')).toBe(123);
    expect(capture.finish().output).toBe('out');
  });

  it("treats another command's marker as plain output", () => {
    const capture = new OutputCapture('x', 100, MARKER);
    expect(feed(capture, '\n__tether_0badc0de:0\n')).toBeUndefined();
    expect(capture.finish().output).toBe('\n__tether_0badc0de:0\n');
  });

  it('keeps only the first cap bytes and reports the output truncated', () => {
    const capture = new OutputCapture('x', 10, MARKER);
    expect(feed(capture, 'a'.repeat(8), 'b'.repeat(100_000), `c${END}`)).toBe(7);
    expect(capture.finish()).toEqual({ output: 'aaaaaaaabb', truncated: true });
  });

  it('drops a character cut in half by the cap instead of mangling it', () => {
    const capture = new OutputCapture('x', 4, MARKER);
    feed(capture, `aaéé${END}`);
    expect(capture.finish()).toEqual({ output: 'aaé', truncated: true });
  });

  it('returns what it held back as a possible marker start when the command never ends', () => {
    const capture = new OutputCapture('x', 100, MARKER);
    expect(feed(capture, 'partial\n__tether_fe')).toBeUndefined();
    expect(capture.finish().output).toBe('partial\n__tether_fe');
  });
});

describe('ansiCQuote', () => {
  it('escapes quotes, backslashes and control characters and leaves the rest as is', () => {
    expect(ansiCQuote("it's a \\ test\n\tdone\x7f é $HOME")).toBe("$'it\\'s a \\\\ test\\x0a\\x09done\\x7f é $HOME'");
  });
});
