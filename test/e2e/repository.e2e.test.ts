import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ConversationInfo, EventOf, LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { startFakeLlmServer, text, toolCall, type FakeLlmServer } from '../support/fakeLlmServer.ts';
import { describeLog } from '../support/faults.ts';
import { MAIN_FILES, startGitRemote, type GitRemote } from '../support/gitRemote.ts';
import { endsAwaiting, repliesTo, stateOf } from '../support/logQueries.ts';
import {
  allEvents,
  eventsWhen,
  freePort,
  http,
  postMessage,
  type ServerProcess,
  type StartServerOptions,
} from '../support/serverProcess.ts';
import type { WsClient } from '../support/wsClient.ts';

// A conversation created with a git repository: the host clones it into the
// workspace while the runtime sets up, once, and the agent is told the
// repository's instruction files as they were read then. The token that
// opened the remote reaches git and nothing else.
const TOKEN = 'ghp_tether_test_token_1234567890';
const TOKEN_SECRET = 'GITHUB_TOKEN';
/** Every node of this file seals secrets with it (a restart or another node must read the conversation's). */
const SECRETS_KEY = randomBytes(32).toString('base64');
const usage = { prompt_tokens: 100, completion_tokens: 10 };
/** How long a wait on the log may take: a clone from the loopback remote takes well under a second. */
const WAIT_MS = 20_000;

const e2e = useE2e();
let remote: GitRemote;
let llm: FakeLlmServer;
/** The shared node: its own nats-server and data dir, the LLM agent, every log line. */
let server: ServerProcess;
/** Every server and client this file started, for the final check that none of them saw the token. */
const servers: ServerProcess[] = [];
const clients: WsClient[] = [];

beforeAll(async () => {
  remote = await startGitRemote({ token: TOKEN, root: await e2e.tempDir() });
  e2e.onCleanup(() => remote.close());
  llm = await startFakeLlmServer();
  e2e.onCleanup(() => llm.close());
  server = await start({ dataDir: await e2e.tempDir(), env: llmEnv() });
}, 60_000);

function llmEnv(): Record<string, string> {
  return {
    TETHER_LLM_BASE_URL: llm.baseUrl,
    TETHER_LLM_API_KEY: 'sk-fake',
    TETHER_LLM_MODEL: 'fake-model',
  };
}

async function start(options: StartServerOptions = {}): Promise<ServerProcess> {
  const env = { TETHER_SECRETS_KEY: SECRETS_KEY, TETHER_LOG_LEVEL: 'debug', ...options.env };
  const started = await e2e.start({ ...options, env });
  servers.push(started);
  return started;
}

/** A client on the conversation that keeps every frame's text, checked for the token at the end. */
async function listen(on: ServerProcess, id: string): Promise<WsClient> {
  const client = await e2e.connect(on, id, { keepRaw: true });
  clients.push(client);
  return client;
}

/** A body that clones the test remote with the token, with `repository` fields and other fields added. */
function withToken(repository: { url?: string; branch?: string } = {}, more: Record<string, unknown> = {}) {
  return {
    secrets: { [TOKEN_SECRET]: TOKEN },
    repository: { url: remote.url, token_secret: TOKEN_SECRET, ...repository },
    ...more,
  };
}

async function create(on: ServerProcess, body: Record<string, unknown>): Promise<string> {
  const created = await http<{ conversation_id: string }>(on.baseUrl, 'POST', '/api/conversations', body);
  expect(created.status, created.text).toBe(201);
  return created.body.conversation_id;
}

async function info(on: ServerProcess, id: string): Promise<ConversationInfo> {
  const res = await http<ConversationInfo>(on.baseUrl, 'GET', `/api/conversations/${id}`);
  expect(res.status, res.text).toBe(200);
  return res.body;
}

type Logged<K extends StoredEvent['type']> = LoggedEvent & { event: EventOf<K> };
const ofType = <K extends StoredEvent['type']>(events: readonly LoggedEvent[], type: K): Array<Logged<K>> =>
  events.filter((e): e is Logged<K> => e.event.type === type);

const REPOSITORY_FACTS = new Set(['repository_cloned', 'repository_clone_failed', 'instructions_loaded']);

/** The runtime's statuses and the repository's facts, in log order: `runtime:setting_up`, `repository_cloned`... */
const setUp = (events: readonly LoggedEvent[]): string[] =>
  events.flatMap(({ event }) => {
    if (event.type === 'runtime_status') return [`runtime:${event.data.status}`];
    return REPOSITORY_FACTS.has(event.type) ? [event.type] : [];
  });

/** `setUp` of the events after the one with this id. */
const setUpAfter = (events: readonly LoggedEvent[], id: number): string[] =>
  setUp(events.filter((e) => e.event.id > id));

/** A runtime that came up in a workspace already cloned: no repository fact on the way. */
const RESTARTED = ['runtime:starting', 'runtime:connecting', 'runtime:setting_up', 'runtime:connected'];

/** The id of the last `session_rehydrated`: where a restarted or taken-over session came back. */
function lastRehydration(events: readonly LoggedEvent[]): number {
  const back = ofType(events, 'session_rehydrated').at(-1);
  expect(back, describeLog(events)).toBeDefined();
  return back!.event.id;
}

/** The log once the runtime connected and the agent waits for the user. */
const untilReady = (on: ServerProcess, id: string) =>
  eventsWhen(
    on,
    id,
    `${id} cloned and connected`,
    (events) => endsAwaiting(events) && setUp(events).at(-1) === 'runtime:connected',
    WAIT_MS,
  );

/**
 * The log once `count` clones have failed and the agent is in error after the last (a failed retry leaves it
 * there: no new state fact follows).
 */
const untilCloneFailed = (on: ServerProcess, id: string, count = 1) =>
  eventsWhen(
    on,
    id,
    `clone failure ${count} of ${id}`,
    (events) => {
      const failed = ofType(events, 'repository_clone_failed');
      const after = events.filter((e) => e.seq > (failed.at(-1)?.seq ?? Infinity));
      return (
        failed.length === count &&
        stateOf(events) === 'error' &&
        after.every((e) => e.event.type === 'agent_state_changed')
      );
    },
    WAIT_MS,
  );

/**
 * Runs a command as the user (`run`), which starts a runtime when none is up (after a restart, a takeover, a
 * fork: the session comes back without one), and returns the log once its output is stored.
 */
async function runCommand(on: ServerProcess, id: string, command: string): Promise<LoggedEvent[]> {
  const outputs = ofType(await allEvents(on.baseUrl, id), 'command_output').length;
  const action = { action: { type: 'run', command } };
  const res = await http(on.baseUrl, 'POST', `/api/conversations/${id}/actions`, action);
  expect(res.status, res.text).toBe(202);
  const ran = (events: LoggedEvent[]) => ofType(events, 'command_output').length > outputs;
  return eventsWhen(on, id, `the output of ${command}`, ran, WAIT_MS);
}

/** The output of the last command in the log. */
const lastOutput = (events: readonly LoggedEvent[]) => ofType(events, 'command_output').at(-1)!.event.data;

/** How often the remote was asked, accepted or refused. */
const remoteRequests = () => ({ authorized: remote.authorized.length, refusals: remote.refusals });

const workspaceOf = (dataDir: string, id: string) => join(dataDir, 'workspaces', id);

/** Every file under a folder, recursively (`.git` included). */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/** The files under a folder whose bytes hold the token. */
const holdingToken = (dir: string): string[] =>
  filesUnder(dir).filter((file) => readFileSync(file).includes(Buffer.from(TOKEN)));

/** A refresh of the page: a new socket and a GET, then a pause in which nothing may be stored or asked of the remote. */
async function expectNoRetryOnRefresh(id: string, before: LoggedEvent[]): Promise<void> {
  const asked = remoteRequests();
  const client = await listen(server, id);
  expect(client.frames[0]).toMatchObject({ type: 'sync', state: 'error' });
  const got = await info(server, id);
  expect(got).toMatchObject({ state: 'error', last_seq: before.at(-1)!.seq });
  expect(got.runtime_status).not.toBe('disconnected');
  await new Promise((resolve) => setTimeout(resolve, 750));
  expect(await allEvents(server.baseUrl, id)).toEqual(before);
  expect(remoteRequests()).toEqual(asked);
}

/** The failed clone's fact and the agent's error, which names the repository and git's reason. */
function expectFailure(events: LoggedEvent[], url: string, reason: RegExp): string {
  const failed = ofType(events, 'repository_clone_failed');
  expect(failed, describeLog(events)).toHaveLength(1);
  const { message } = failed[0]!.event.data;
  expect(message).toMatch(reason);
  expect(failed[0]!.event.data.url).toBe(url);
  expect(setUp(events).slice(-2)).toEqual(['runtime:setting_up', 'repository_clone_failed']);
  const last = events.at(-1)!.event;
  expect(last).toMatchObject({
    type: 'agent_state_changed',
    data: { state: 'error', reason: `the repository ${url} could not be cloned: ${message}` },
  });
  expect(ofType(events, 'repository_cloned')).toEqual([]);
  expect(ofType(events, 'instructions_loaded')).toEqual([]);
  return message;
}

/** The system message of an LLM request. */
function systemOf(request: { body: { messages?: Array<{ role: string; content: unknown }> } }): string {
  const system = request.body.messages?.find((m) => m.role === 'system');
  expect(typeof system?.content).toBe('string');
  return system!.content as string;
}

const HAIKU = `Instructions from the repository's AGENTS.md:\n${MAIN_FILES['AGENTS.md']}`;

describe('a conversation created with a repository', () => {
  it('clones it with the token while the runtime sets up, then reads its instruction files, then connects; the sandboxed shell works in the checkout', async () => {
    const before = remoteRequests();
    const id = await create(server, withToken());
    const events = await untilReady(server, id);

    expect(setUp(events)).toEqual([
      'runtime:starting',
      'runtime:connecting',
      'runtime:setting_up',
      'repository_cloned',
      'instructions_loaded',
      'runtime:connected',
    ]);
    const cloned = ofType(events, 'repository_cloned')[0]!.event.data;
    expect(cloned).toEqual({ url: remote.url, branch: 'main', commit: remote.heads.main });
    const files = ofType(events, 'instructions_loaded')[0]!.event.data.files;
    expect(files).toEqual(
      (['AGENTS.md', '.openhands/microagents/repo.md'] as const).map((path) => ({
        path,
        text: MAIN_FILES[path],
        bytes: Buffer.byteLength(MAIN_FILES[path]),
        truncated: false,
      })),
    );
    // The remote was asked with the token, after refusing git's first request (anonymous) at most.
    const credentials = `Basic ${Buffer.from(`x-access-token:${TOKEN}`).toString('base64')}`;
    expect(remote.authorized.slice(before.authorized)).toContain(credentials);
    expect(remote.refusals - before.refusals).toBeLessThanOrEqual(1);

    const workspace = workspaceOf(server.dataDir, id);
    expect(readFileSync(join(workspace, 'AGENTS.md'), 'utf8')).toBe(MAIN_FILES['AGENTS.md']);
    expect(existsSync(join(workspace, '.git', 'HEAD'))).toBe(true);
    expect(existsSync(join(workspace, 'FEATURE.txt'))).toBe(false);

    // The shell, in its sandbox, sees the checkout the host made.
    expect((await info(server, id)).sandbox).toBe('bwrap');
    const after = await runCommand(server, id, 'cat AGENTS.md && git rev-parse HEAD');
    expect(lastOutput(after)).toMatchObject({
      exit_code: 0,
      output: `${MAIN_FILES['AGENTS.md']}${remote.heads.main}\n`,
    });
  });

  it('checks out the branch it names', async () => {
    const id = await create(server, withToken({ branch: 'feature' }));
    const events = await untilReady(server, id);
    expect(ofType(events, 'repository_cloned').map((e) => e.event.data)).toEqual([
      { url: remote.url, branch: 'feature', commit: remote.heads.feature },
    ]);
    const workspace = workspaceOf(server.dataDir, id);
    expect(readFileSync(join(workspace, 'FEATURE.txt'), 'utf8')).toBe('feature branch\n');
    expect(existsSync(join(workspace, 'AGENTS.md'))).toBe(true);
  });

  it('is refused at creation, storing nothing, when the URL holds credentials or token_secret names no secret', async () => {
    const listed = async () =>
      (await http<{ items: unknown[] }>(server.baseUrl, 'GET', '/api/conversations?limit=100')).body.items.length;
    const count = await listed();
    const inUrl = remote.url.replace('http://', `http://x-access-token:${TOKEN}@`);
    const bodies = [
      { repository: { url: inUrl } },
      { secrets: { OTHER: 'x' }, repository: { url: remote.url, token_secret: TOKEN_SECRET } },
    ];
    for (const body of bodies) {
      const res = await http<{ error: { code: string; message: string } }>(
        server.baseUrl,
        'POST',
        '/api/conversations',
        body,
      );
      expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status: 400, code: 'BAD_REQUEST' });
      expect(res.body.error.message).toMatch(/repository/);
      expect(res.text).not.toContain(TOKEN);
    }
    expect(await listed()).toBe(count);
  });

  it('without the token ends in error; a refresh does not clone again, reconnect_runtime does', async () => {
    const asked = remoteRequests();
    const id = await create(server, { repository: { url: remote.url } });
    const failed = await untilCloneFailed(server, id);
    expectFailure(failed, remote.url, /authentication required/);
    expect(remote.refusals).toBeGreaterThan(asked.refusals);
    expect(existsSync(join(workspaceOf(server.dataDir, id), 'AGENTS.md'))).toBe(false);

    await expectNoRetryOnRefresh(id, failed);

    const refusals = remote.refusals;
    const reconnect = await http(server.baseUrl, 'POST', `/api/conversations/${id}/actions`, {
      action: { type: 'reconnect_runtime' },
    });
    expect(reconnect.status, reconnect.text).toBe(202);
    const again = await untilCloneFailed(server, id, 2);
    const tail = again.slice(failed.length);
    expect(tail[0]?.event).toMatchObject({ source: 'user', type: 'reconnect_runtime' });
    expect(ofType(tail, 'reconnect_runtime')).toHaveLength(1);
    expect(setUp(tail)).toEqual([
      'runtime:starting',
      'runtime:connecting',
      'runtime:setting_up',
      'repository_clone_failed',
    ]);
    expect(ofType(tail, 'repository_clone_failed')[0]!.event.data.message).toMatch(/authentication required/);
    expect(stateOf(again)).toBe('error');
    expect(remote.refusals).toBeGreaterThan(refusals);
  });

  const failures = [
    {
      what: 'a branch the remote does not have',
      repository: () => ({ url: remote.url, branch: 'no-such-branch' }),
      reason: /Remote branch no-such-branch not found/,
    },
    {
      what: 'a URL where nothing listens',
      repository: async () => ({ url: `http://127.0.0.1:${await freePort()}/x.git` }),
      reason: /Failed to connect to 127\.0\.0\.1 port/,
    },
  ];
  for (const { what, repository, reason } of failures) {
    it(`with ${what} ends in error with git's reason, and a refresh does not clone again`, async () => {
      const repo = await repository();
      const id = await create(server, withToken(repo));
      const failed = await untilCloneFailed(server, id);
      const message = expectFailure(failed, repo.url, reason);
      expect(ofType(failed, 'repository_clone_failed')[0]!.event.data).toEqual({ ...repo, message });
      await expectNoRetryOnRefresh(id, failed);
    });
  }

  it('forked after the clone, keeps the checkout in the fork and does not clone again', async () => {
    const parent = await create(server, withToken());
    const cloned = await untilReady(server, parent);
    const asked = remoteRequests();
    const forked = await http<{ conversation_id: string }>(
      server.baseUrl,
      'POST',
      `/api/conversations/${parent}/fork`,
      { at_seq: cloned.at(-1)!.seq },
    );
    expect(forked.status, forked.text).toBe(201);
    const fork = forked.body.conversation_id;

    // The fork's runtime comes up in the copied checkout: a command shows it.
    const events = await runCommand(server, fork, 'cat AGENTS.md && git rev-parse HEAD');
    expect(lastOutput(events)).toMatchObject({
      exit_code: 0,
      output: `${MAIN_FILES['AGENTS.md']}${remote.heads.main}\n`,
    });
    const forkedAt = ofType(events, 'conversation_forked')[0]!.event.id;
    expect(setUpAfter(events, forkedAt)).toEqual(RESTARTED);
    expect(ofType(events, 'repository_cloned')).toHaveLength(1);
    expect(ofType(events, 'instructions_loaded')).toHaveLength(1);
    const workspace = workspaceOf(server.dataDir, fork);
    expect(readFileSync(join(workspace, 'AGENTS.md'), 'utf8')).toBe(MAIN_FILES['AGENTS.md']);
    expect(existsSync(join(workspace, '.git', 'HEAD'))).toBe(true);
    expect(remoteRequests()).toEqual(asked);
  });

  it('tells the LLM the AGENTS.md read at the clone, and after the file changed and the server restarted, still that one, without cloning again', async () => {
    const dataDir = await e2e.tempDir();
    const first = await start({ dataDir, env: llmEnv() });
    const sent = llm.requests.length;
    llm.enqueue(text('Old pond, a frog jumps.'));
    const id = await create(first, withToken({}, { initial_message: 'Say hello.' }));
    const answered = (count: number) => (e: LoggedEvent[]) => endsAwaiting(e) && ofType(e, 'message').length === count;
    await eventsWhen(first, id, 'the first answer', answered(2), WAIT_MS);
    expect(llm.requests.length).toBe(sent + 1);
    expect(systemOf(llm.requests.at(-1)!)).toContain(HAIKU);

    const agents = join(workspaceOf(dataDir, id), 'AGENTS.md');
    writeFileSync(agents, 'Always answer in French.\n');
    expect(await first.stop()).toEqual({ code: 0, signal: null });

    const asked = remoteRequests();
    const second = await start({ dataDir, env: llmEnv() });
    // A runtime starts in the workspace as the restart found it: the edited file, no new clone, the remote not asked.
    const ran = await runCommand(second, id, 'cat AGENTS.md');
    expect(lastOutput(ran)).toMatchObject({ exit_code: 0, output: 'Always answer in French.\n' });
    expect(setUpAfter(ran, lastRehydration(ran))).toEqual(RESTARTED);
    expect(remoteRequests()).toEqual(asked);

    llm.enqueue(text('Un autre? Non: haiku.'));
    await postMessage(second, id, 'Another one?');
    const events = await eventsWhen(second, id, 'the second answer', answered(4), WAIT_MS);
    expect(llm.requests.length).toBe(sent + 2);
    // The agent was shown the edited file (the command's output), but its instructions are those stored at the clone.
    expect(JSON.stringify(llm.requests.at(-1)!.body)).toContain('Always answer in French.');
    const system = systemOf(llm.requests.at(-1)!);
    expect(system).toContain(HAIKU);
    expect(system).not.toContain('French');
    expect(ofType(events, 'repository_cloned')).toHaveLength(1);
    expect(ofType(events, 'instructions_loaded')).toHaveLength(1);
    expect(holdingToken(workspaceOf(dataDir, id))).toEqual([]);
  });

  it('taken over by another node after its owner was killed, goes on in the same checkout without cloning again', async () => {
    const nats = await e2e.nats();
    const workspaces = await e2e.tempDir();
    const env = { NATS_URL: nats.url, TETHER_LEASE_MS: '1000', TETHER_WORKSPACES_DIR: workspaces };
    const [owner, other] = await Promise.all([
      start({ env: { ...env, TETHER_NODE_ID: 'owner' } }),
      start({ env: { ...env, TETHER_NODE_ID: 'other' } }),
    ]);
    const id = await create(owner, withToken());
    const cloned = await untilReady(owner, id);
    expect(ofType(cloned, 'repository_cloned')).toHaveLength(1);
    expect((await info(owner, id)).owner).toBe('owner');

    const asked = remoteRequests();
    owner.kill('SIGKILL');
    expect((await owner.exited).signal).toBe('SIGKILL');
    await postMessage(other, id, 'still there?');
    const replied = (e: LoggedEvent[]) => repliesTo(e, 'still there?').length === 1;
    await eventsWhen(other, id, 'the answer on the other node', replied, WAIT_MS);
    const events = await runCommand(other, id, 'cat AGENTS.md && git rev-parse HEAD');
    expect(lastOutput(events)).toMatchObject({
      exit_code: 0,
      output: `${MAIN_FILES['AGENTS.md']}${remote.heads.main}\n`,
    });
    expect((await info(other, id)).owner).toBe('other');
    const back = lastRehydration(events);
    expect(back).toBeGreaterThan(cloned.at(-1)!.event.id);
    expect(setUpAfter(events, back)).toEqual(RESTARTED);
    expect(ofType(events, 'repository_cloned')).toHaveLength(1);
    expect(ofType(events, 'instructions_loaded')).toHaveLength(1);
    expect(remoteRequests()).toEqual(asked);
    expect(holdingToken(workspaces)).toEqual([]);
  });

  // Last: it stops the shared node, to read its store as written.
  it('leaves the token in no file of the workspace or the data dir, no frame, no log line and no LLM request', async () => {
    llm.enqueue(
      toolCall('run_command', { command: `cat .git/config; printenv ${TOKEN_SECRET}; git remote -v` }, usage),
      text('The remote is set.'),
    );
    const sent = llm.requests.length;
    const id = await create(server, withToken({}, { initial_message: 'Show me the remote.' }));
    const client = await listen(server, id);
    const done = (e: LoggedEvent[]) => endsAwaiting(e) && ofType(e, 'command_output').length === 1;
    const events = await eventsWhen(server, id, 'the answer', done, WAIT_MS);
    await client.waitUntil(() => client.lastSeq() >= events.at(-1)!.seq, { what: 'every event on the socket' });
    // The command read the checkout's config and the secret, masked, and the LLM was told.
    const output = ofType(events, 'command_output')[0]!.event.data.output;
    expect(output).toContain(`url = ${remote.url}`);
    expect(output).toContain('<secret_hidden>');
    expect(llm.requests.length).toBe(sent + 2);
    expect(JSON.stringify(llm.requests.at(-1)!.body)).toContain('<secret_hidden>');

    expect(await server.stop()).toEqual({ code: 0, signal: null });
    // The scan reads the checkout's git objects, and the store's bytes: the events are there (the command's output).
    const workspace = filesUnder(workspaceOf(server.dataDir, id));
    expect(workspace.some((file) => file.includes(join('.git', 'objects')))).toBe(true);
    const store = filesUnder(join(server.dataDir, 'nats'));
    expect(store.some((file) => readFileSync(file).includes(Buffer.from(`url = ${remote.url}`)))).toBe(true);
    expect(holdingToken(server.dataDir)).toEqual([]);

    expect(clients.length).toBeGreaterThan(1);
    for (const seen of clients) expect(seen.raw.join('\n')).not.toContain(TOKEN);
    expect(servers.length).toBeGreaterThan(3);
    for (const ran of servers) {
      // The whole log: its first line is still in what was kept of it.
      expect(ran.stderr()).toContain('"msg":"tether starting"');
      expect(ran.stderr()).not.toContain(TOKEN);
    }
    expect(server.stderr()).toContain('"level":"debug"');
    expect(JSON.stringify(llm.requests.map(({ url, headers, body }) => ({ url, headers, body })))).not.toContain(TOKEN);
  });
});
