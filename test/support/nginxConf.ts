// A small reader of nginx configuration text, enough for tests to check a config
// file's directives instead of matching its text: words, quoted strings, `;`,
// blocks in braces and `#` comments.

export interface NginxDirective {
  name: string;
  args: string[];
  /** The directives inside its braces, for a block directive (`server { ... }`). */
  block?: NginxDirective[];
}

/** Parses nginx configuration text into its directives; throws on unbalanced braces or a missing `;`. */
export function parseNginxConf(text: string): NginxDirective[] {
  const tokens = tokenize(text);
  let at = 0;
  const parseBlock = (nested: boolean): NginxDirective[] => {
    const directives: NginxDirective[] = [];
    let words: string[] = [];
    while (at < tokens.length) {
      const token = tokens[at++]!;
      if (token.punct === ';' || token.punct === '{') {
        const [name, ...args] = words;
        if (name === undefined) throw new Error(`nginx conf: '${token.punct}' with no directive before it`);
        directives.push(token.punct === '{' ? { name, args, block: parseBlock(true) } : { name, args });
        words = [];
      } else if (token.punct === '}') {
        if (!nested || words.length > 0) throw new Error('nginx conf: unexpected }');
        return directives;
      } else words.push(token.word);
    }
    if (nested || words.length > 0) throw new Error('nginx conf: unexpected end (missing } or ;)');
    return directives;
  };
  return parseBlock(false);
}

/** Every directive named `name`, at any depth. */
export function findDirectives(directives: NginxDirective[], name: string): NginxDirective[] {
  return directives.flatMap((d) => [...(d.name === name ? [d] : []), ...findDirectives(d.block ?? [], name)]);
}

/** An nginx time (`90`, `30s`, `10m`, `1h`, `1h30m`) in seconds; NaN when it is not one. */
export function nginxSeconds(text: string): number {
  const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86_400 };
  const parts = [...text.matchAll(/(\d+)(ms|s|m|h|d)?/g)];
  if (parts.map((p) => p[0]).join('') !== text || parts.length === 0) return NaN;
  return parts.reduce((sum, p) => sum + Number(p[1]) * units[p[2] ?? 's']!, 0);
}

/** A `;`, `{` or `}` (punct), or a word or quoted string (punct null). */
interface Token {
  punct: ';' | '{' | '}' | null;
  word: string;
}

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (/\s/.test(c)) i++;
    else if (c === '#') while (i < text.length && text[i] !== '\n') i++;
    else if (c === ';' || c === '{' || c === '}') {
      tokens.push({ punct: c, word: c });
      i++;
    } else if (c === "'" || c === '"') {
      const end = text.indexOf(c, i + 1);
      if (end < 0) throw new Error('nginx conf: unterminated quote');
      tokens.push({ punct: null, word: text.slice(i + 1, end) });
      i = end + 1;
    } else {
      let end = i;
      while (end < text.length && !/[\s;{}#]/.test(text[end]!)) end++;
      tokens.push({ punct: null, word: text.slice(i, end) });
      i = end;
    }
  }
  return tokens;
}
