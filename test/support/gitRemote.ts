import { execFile, spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface GitRemote {
  /** The repository's URL: `http://127.0.0.1:PORT/repo.git`. */
  url: string;
  /** The sha of each branch's tip. */
  heads: { main: string; feature: string };
  /** How many requests were refused with 401 (no or wrong credentials). */
  refusals: number;
  /** Every Authorization header seen, accepted or not. */
  authorized: string[];
  /** Stops the server (dropping open connections); `root` is left for the caller to remove. */
  close(): Promise<void>;
}

/** The files of the `main` branch, by path. */
export const MAIN_FILES = {
  'README.md': '# test repository\n',
  'AGENTS.md': 'Always answer in haiku.\n',
  '.openhands/microagents/repo.md': 'Run the tests with make test.\n',
};

/**
 * A git repository served over smart HTTP by `git http-backend` (as CGI) on
 * 127.0.0.1, behind Basic authentication with `token` as the password (any user
 * name). `main` (HEAD) holds MAIN_FILES; `feature` adds FEATURE.txt.
 */
export async function startGitRemote(options: { token: string; root: string }): Promise<GitRemote> {
  const heads = await createRepository(options.root);
  const remote = { refusals: 0, authorized: [] as string[] };
  const server = createServer((req, res) => {
    const header = req.headers.authorization;
    if (header !== undefined) remote.authorized.push(header);
    if (!allows(header, options.token)) {
      remote.refusals++;
      req.resume();
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="test"' }).end();
      return;
    }
    backend(options.root, req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(remote, {
    url: `http://127.0.0.1:${port}/repo.git`,
    heads,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

/** Whether `header` is `Basic base64(user:token)`. */
function allows(header: string | undefined, token: string): boolean {
  const match = /^Basic (.+)$/.exec(header ?? '');
  if (!match?.[1]) return false;
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  return decoded.includes(':') && decoded.slice(decoded.indexOf(':') + 1) === token;
}

/** Builds `root/repo.git` (bare, HEAD on main) from a work tree in `root/work`; returns the branch tips. */
async function createRepository(root: string): Promise<GitRemote['heads']> {
  const work = join(root, 'work');
  const git = async (...args: string[]) =>
    (await run('git', ['-c', 'user.name=test', '-c', 'user.email=test@example.invalid', ...args], { cwd: work }))
      .stdout;
  await mkdir(work, { recursive: true });
  await git('init', '-q', '-b', 'main');
  for (const [path, text] of Object.entries(MAIN_FILES)) {
    await mkdir(dirname(join(work, path)), { recursive: true });
    await writeFile(join(work, path), text);
  }
  await git('add', '-A');
  await git('commit', '-q', '-m', 'initial');
  await git('checkout', '-q', '-b', 'feature');
  await writeFile(join(work, 'FEATURE.txt'), 'feature branch\n');
  await git('add', 'FEATURE.txt');
  await git('commit', '-q', '-m', 'feature');
  const bare = join(root, 'repo.git');
  await git('clone', '-q', '--bare', work, bare);
  await git('--git-dir', bare, 'symbolic-ref', 'HEAD', 'refs/heads/main');
  const [main = '', feature = ''] = (await git('--git-dir', bare, 'rev-parse', 'main', 'feature')).trim().split('\n');
  return { main, feature };
}

/** Answers one request with `git http-backend` run as CGI. */
function backend(root: string, req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    GIT_PROJECT_ROOT: root,
    GIT_HTTP_EXPORT_ALL: '1',
    REQUEST_METHOD: req.method ?? 'GET',
    PATH_INFO: decodeURIComponent(url.pathname),
    QUERY_STRING: url.search.slice(1),
    CONTENT_TYPE: req.headers['content-type'] ?? '',
    REMOTE_USER: 'test',
    REMOTE_ADDR: '127.0.0.1',
  };
  if (req.headers['content-length']) env.CONTENT_LENGTH = req.headers['content-length'];
  if (req.headers['content-encoding']) env.HTTP_CONTENT_ENCODING = req.headers['content-encoding'];
  const protocol = req.headers['git-protocol'];
  if (typeof protocol === 'string') env.GIT_PROTOCOL = protocol;
  const cgi = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'inherit'] });
  req.pipe(cgi.stdin);
  cgi.stdin.on('error', () => {}); // the backend answered without reading the whole body
  cgi.on('error', (error) => res.writeHead(500).end(error.message));
  res.on('close', () => cgi.kill('SIGKILL')); // the client went away: nothing to answer
  cgi.on('close', () => res.headersSent || res.writeHead(502).end()); // it ended before its headers
  let head = Buffer.alloc(0);
  const onHead = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    const end = headEnd(head);
    if (!end) return;
    cgi.stdout.off('data', onHead);
    respond(res, head.subarray(0, end.at).toString('latin1'));
    res.write(head.subarray(end.at + end.length));
    cgi.stdout.pipe(res);
  };
  cgi.stdout.on('data', onHead);
}

/** Where the CGI headers end: the blank line, CRLF or LF. */
function headEnd(head: Buffer): { at: number; length: number } | undefined {
  const crlf = head.indexOf('\r\n\r\n');
  const lf = head.indexOf('\n\n');
  if (crlf >= 0 && (lf < 0 || crlf < lf)) return { at: crlf, length: 4 };
  return lf >= 0 ? { at: lf, length: 2 } : undefined;
}

/** Writes the status and headers of a CGI header block (`Status: 404 Not Found`, else 200). */
function respond(res: ServerResponse, block: string): void {
  let status = 200;
  const headers: Record<string, string> = {};
  for (const line of block.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const [name, value] = [line.slice(0, colon).trim(), line.slice(colon + 1).trim()];
    if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10);
    else headers[name] = value;
  }
  res.writeHead(status, headers);
}
