import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { beforeEach, describe, expect, it } from 'vitest';
import { agentStateOf, foldEvents, traceLog } from '../../machines/index.ts';
import {
  ConversationInfo,
  ConversationState,
  LoggedEvent,
  type ConversationPage,
  type EventOf,
} from '../../protocol/index.ts';
import {
  connectNats,
  DEFAULT_CHECKPOINT_BUCKET,
  DEFAULT_SECRET_BUCKET,
  type EmbeddedNats,
  type NatsConnection,
} from '../../src/store/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { http, type HttpResult, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

// Time travel and forks over HTTP, against `tether serve` processes on a
// nats-server of each test's own, which the test also reads directly: the
// checkpoint bucket, the event stream's subjects, and the fork's copies live.

const ALICE = 'alice-token-time-travel-0001';
const BOB = 'bob-token-time-travel-0002';
const SECRET = 'fork-secret-Vx93-kept-hidden';
const EVERY = 5;
const EVENTS_STREAM = 'TETHER_EVENTS';
const SECRETS_KEY = randomBytes(32).toString('hex');

const e2e = useE2e();
let nats: EmbeddedNats;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeEach(async () => {
  nats = await e2e.nats();
  const connection = await connectNats(nats.url, { name: 'time-travel-test' });
  e2e.onCleanup(() => connection.close());
  nc = connection;
  jsm = await jetstreamManager(nc);
});

/** A `tether serve` on this test's nats-server (secrets sealed: a shared NATS refuses them otherwise). */
function start(env: Record<string, string> = {}, dataDir?: string): Promise<ServerProcess> {
  return e2e.start({
    ...(dataDir !== undefined && { dataDir }),
    env: {
      NATS_URL: nats.url,
      TETHER_SECRETS_KEY: SECRETS_KEY,
      TETHER_TOKENS: `${ALICE}:alice,${BOB}:bob`,
      TETHER_CHECKPOINT_EVERY: String(EVERY),
      ...env,
    },
  });
}

function api<T = unknown>(
  server: ServerProcess,
  method: string,
  path: string,
  body?: unknown,
  token = ALICE,
): Promise<HttpResult<T>> {
  return http<T>(server.baseUrl, method, path, body, token);
}

async function create(server: ServerProcess, body: Record<string, unknown> = {}): Promise<string> {
  const res = await api<{ conversation_id: string }>(server, 'POST', '/api/conversations', body);
  expect(res.status, res.text).toBe(201);
  return res.body.conversation_id;
}

async function post(server: ServerProcess, id: string, content: string, token = ALICE): Promise<void> {
  const res = await api(
    server,
    'POST',
    `/api/conversations/${id}/actions`,
    { action: { type: 'message', content } },
    token,
  );
  if (res.status !== 202) throw new Error(`posting "${content}" to ${id}: ${res.status} ${res.text}`);
}

/** Every stored event of a conversation over REST, page by page, each checked against the schema. */
async function eventsOf(server: ServerProcess, id: string, token = ALICE): Promise<LoggedEvent[]> {
  const items: LoggedEvent[] = [];
  for (let after = 0; ;) {
    const res = await api<{ items: unknown[]; has_more: boolean }>(
      server,
      'GET',
      `/api/conversations/${id}/events?after_seq=${after}&limit=1000`,
      undefined,
      token,
    );
    if (res.status !== 200) throw new Error(`GET events of ${id}: ${res.status} ${res.text}`);
    items.push(...res.body.items.map((item) => LoggedEvent.parse(item)));
    if (!res.body.has_more) return items;
    after = items.at(-1)!.seq;
  }
}

function eventsWhen(
  server: ServerProcess,
  id: string,
  what: string,
  test: (events: LoggedEvent[]) => boolean,
  timeoutMs = 20_000,
): Promise<LoggedEvent[]> {
  return until(
    async () => {
      const events = await eventsOf(server, id);
      return test(events) ? events : undefined;
    },
    what,
    { ...SERVER_WAIT, timeoutMs },
  );
}

/** The user message `content` is stored, and after it the agent waited for the user again: it was answered. */
const answered = (content: string) => (events: readonly LoggedEvent[]) => {
  const at = events.findIndex(
    (e) => e.event.source === 'user' && e.event.type === 'message' && e.event.data.content === content,
  );
  return (
    at >= 0 &&
    events
      .slice(at + 1)
      .some((e) => e.event.type === 'agent_state_changed' && e.event.data.state === 'awaiting_user_input')
  );
};

async function say(server: ServerProcess, id: string, content: string): Promise<LoggedEvent[]> {
  await post(server, id, content);
  return eventsWhen(server, id, `the answer to "${content}" in ${id}`, answered(content));
}

type Output = LoggedEvent & { event: EventOf<'command_output'> };

/** The output of the command the agent ran for the user message `content`. */
function outputFor(events: readonly LoggedEvent[], content: string): Output['event']['data'] | undefined {
  const command = content.slice(1);
  const output = events.find((e): e is Output => e.event.type === 'command_output' && e.event.data.command === command);
  return output?.event.data;
}

async function info(server: ServerProcess, id: string, token = ALICE): Promise<HttpResult<ConversationInfo>> {
  return api<ConversationInfo>(server, 'GET', `/api/conversations/${id}`, undefined, token);
}

async function listed(server: ServerProcess, token = ALICE): Promise<string[]> {
  const res = await api<ConversationPage>(server, 'GET', '/api/conversations', undefined, token);
  expect(res.status).toBe(200);
  return res.body.items.map((item) => item.conversation_id);
}

async function stateAt(server: ServerProcess, id: string, atSeq?: number | string, token = ALICE) {
  const query = atSeq === undefined ? '' : `?at_seq=${encodeURIComponent(String(atSeq))}`;
  return api<ConversationState & { error?: { code: string } }>(
    server,
    'GET',
    `/api/conversations/${id}/state${query}`,
    undefined,
    token,
  );
}

/** Messages per subject of a stream, for the subjects matching `filter` (a stream info, no consumer). */
async function subjectCounts(stream: string, filter: string): Promise<Record<string, number>> {
  const { state } = await jsm.streams.info(stream, { subjects_filter: filter });
  return state.subjects ?? {};
}

/** How many events the stream holds for a conversation. */
async function storedEvents(id: string): Promise<number> {
  const subject = `tether.conv.${id}.events`;
  return (await subjectCounts(EVENTS_STREAM, subject))[subject] ?? 0;
}

/** The seqs of a conversation's checkpoints, as their keys (`<conversation>.<seq>`) name them, ascending. */
async function checkpointSeqs(id: string): Promise<number[]> {
  const prefix = `$KV.${DEFAULT_CHECKPOINT_BUCKET}.${id}.`;
  const subjects = await subjectCounts(`KV_${DEFAULT_CHECKPOINT_BUCKET}`, `${prefix}*`);
  return Object.keys(subjects)
    .map((subject) => Number(subject.slice(prefix.length)))
    .sort((a, b) => a - b);
}

function bucket(name: string): Promise<KV> {
  return new Kvm(nc).open(name);
}

/**
 * A checkpoint each time the event count passed a multiple of EVERY (in memory
 * or not since, copied by a fork or written by an owner), at the last event of
 * the decision that passed it. Returns their seqs.
 */
async function expectCheckpointsAtMultiples(id: string, logged: readonly LoggedEvent[]): Promise<number[]> {
  const multiples = Array.from({ length: Math.floor(logged.length / EVERY) }, (_, i) => i + 1);
  // The owner writes a checkpoint after its decision is applied, without waiting for it: the last may be on its way.
  const checkpoints = await until(
    async () => {
      const seqs = await checkpointSeqs(id);
      return seqs.length >= multiples.length ? seqs : undefined;
    },
    `${multiples.length} checkpoints of ${id}`,
    { ...SERVER_WAIT, timeoutMs: 5_000 },
  ).catch(() => checkpointSeqs(id));
  const kv = await bucket(DEFAULT_CHECKPOINT_BUCKET);
  const bySeq = new Map(logged.map((l) => [l.seq, l]));
  const passed: number[] = [];
  for (const seq of checkpoints) {
    const at = bySeq.get(seq);
    expect(at, `checkpoint ${seq} names one of ${id}'s events`).toBeDefined();
    const record = (await kv.get(`${id}.${seq}`))?.json<{
      conversation_id: string;
      seq: number;
      next_event_id: number;
    }>();
    expect(record).toMatchObject({ conversation_id: id, seq, next_event_id: at!.event.id + 1 });
    passed.push(Math.floor(record!.next_event_id / EVERY));
  }
  expect(passed, `checkpoints of ${id} at seqs ${checkpoints.join(', ')}`).toEqual(multiples);
  return checkpoints;
}

/** GET state at every event of `logged` (a whole log) equals a local fold of the log up to it. */
async function expectStatesFold(server: ServerProcess, id: string, logged: readonly LoggedEvent[]): Promise<void> {
  const { steps } = traceLog(logged);
  for (const [i, item] of logged.entries()) {
    const res = await stateAt(server, id, item.seq);
    expect(res.status, res.text).toBe(200);
    const at = ConversationState.parse(res.body);
    const fold = foldEvents(logged.slice(0, i + 1)).snapshot;
    const what = `state of ${id} at seq ${item.seq} (#${i} ${item.event.type})`;
    expect(at.seq, what).toBe(item.seq);
    expect(at.event, what).toEqual(item.event);
    expect(at.state, what).toBe(agentStateOf(fold));
    expect(at.value, what).toEqual(fold.value);
    expect(at.context, what).toEqual(JSON.parse(JSON.stringify(fold.context)));
    const step = steps[i]!;
    expect(at.transition, what).toEqual(
      step.to === null ? null : { from: step.from === null ? [] : step.from.split(', '), to: step.to.split(', ') },
    );
  }
}

const userMessages = (events: readonly LoggedEvent[]) =>
  events.filter((e) => e.event.source === 'user' && e.event.type === 'message').length;

describe('the state of a conversation at one of its events, over HTTP', () => {
  it('equals a local fold of its events up to it at every seq, from checkpoints; BAD_SEQ for anything else, 404 to another user; a passivated conversation stays out of memory and nothing is stored; DELETE purges its checkpoints', async () => {
    // No client ever connects: the close delay sends each conversation out of memory once it waits.
    const server = await start({ TETHER_CLOSE_DELAY_MS: '600' });
    const id = await create(server, { initial_message: 'hello' });
    await eventsWhen(server, id, 'the answer to "hello"', answered('hello'));
    // Another conversation of the same user, whose events fall between this one's.
    const other = await create(server, { initial_message: 'elsewhere' });
    await eventsWhen(server, other, 'the answer to "elsewhere"', answered('elsewhere'));
    const outOfMemory = () =>
      until(
        async () => ((await info(server, id)).body.in_memory ? undefined : true),
        `${id} out of memory`,
        SERVER_WAIT,
      );
    for (const content of ['!echo one', 'two']) await say(server, id, content);
    // Out of memory and back in the middle of the log: the fold goes through a passivation and a rehydration.
    await outOfMemory();
    for (const content of ['!ls -a', 'three']) await say(server, id, content);
    await outOfMemory();
    const logged = await eventsOf(server, id);
    expect(logged.map((l) => l.event.type)).toContain('session_rehydrated');
    expect(logged.at(-1)?.event.type).toBe('session_passivated');
    const before = await info(server, id);
    expect(before.body).toMatchObject({ in_memory: false, last_seq: logged.at(-1)!.seq, state: 'awaiting_user_input' });
    expect(logged.length).toBeGreaterThan(4 * EVERY);

    const checkpoints = await expectCheckpointsAtMultiples(id, logged);
    await expectStatesFold(server, id, logged);

    // Without at_seq: right after the last event.
    const latest = await stateAt(server, id);
    expect(latest.status, latest.text).toBe(200);
    const whole = foldEvents(logged).snapshot;
    expect(latest.body).toMatchObject({ seq: logged.at(-1)!.seq, event: logged.at(-1)!.event, value: whole.value });
    expect(latest.body.state).toBe(agentStateOf(whole));

    // Anything that is not one of its events.
    const ofOther = (await eventsOf(server, other)).map((l) => l.seq).filter((seq) => seq < logged.at(-1)!.seq);
    expect(ofOther.length, 'the other conversation has events inside this one’s range').toBeGreaterThan(0);
    for (const bad of [0, -1, 'abc', ofOther[0]!, logged.at(-1)!.seq + 1, logged.at(-1)!.seq + 1000]) {
      const res = await stateAt(server, id, bad);
      expect({ at: bad, status: res.status, code: res.body?.error?.code }).toEqual({
        at: bad,
        status: 400,
        code: 'BAD_SEQ',
      });
    }
    // Another user's conversation does not exist for them.
    for (const at of [logged[2]!.seq, undefined]) {
      const res = await stateAt(server, id, at, BOB);
      expect({ status: res.status, code: res.body?.error?.code }).toEqual({
        status: 404,
        code: 'CONVERSATION_NOT_FOUND',
      });
    }

    // The reads stored nothing and brought nothing back into memory.
    const after = await info(server, id);
    expect(after.body).toMatchObject({ in_memory: false, last_seq: before.body.last_seq });
    expect(await eventsOf(server, id)).toEqual(logged);
    expect(await checkpointSeqs(id)).toEqual(checkpoints);

    // DELETE purges its checkpoints with its events, and leaves the other conversation's alone.
    const othersCheckpoints = await checkpointSeqs(other);
    expect(othersCheckpoints.length).toBeGreaterThan(0);
    expect((await api(server, 'DELETE', `/api/conversations/${id}`)).status).toBe(204);
    expect(await checkpointSeqs(id)).toEqual([]);
    expect(await storedEvents(id)).toBe(0);
    expect(await checkpointSeqs(other)).toEqual(othersCheckpoints);
    expect((await stateAt(server, id, logged[2]!.seq)).status).toBe(404);
  }, 40_000);
});

describe('a fork over HTTP', () => {
  it('copies the history through at_seq, says where it came from, is listed, goes on with the parent’s workspace and secrets, and leaves the parent as it was; another user gets 404 and a bad seq BAD_SEQ', async () => {
    const server = await start();
    const workspaces = join(server.dataDir, 'workspaces');
    const parent = await create(server, { initial_message: '!echo hi > f.txt', secrets: { FORK_SECRET: SECRET } });
    const made = await eventsWhen(server, parent, 'f.txt written', answered('!echo hi > f.txt'));
    expect(outputFor(made, '!echo hi > f.txt')).toMatchObject({ exit_code: 0 });
    // Another conversation of the same user, whose events fall between the parent's.
    const other = await create(server, { initial_message: 'elsewhere' });
    await eventsWhen(server, other, 'the answer to "elsewhere"', answered('elsewhere'));
    const throughCut = await say(server, parent, 'before the cut');
    const cut = throughCut.at(-1)!.seq;
    const parentBefore = await say(server, parent, 'after the cut');
    const ofOther = (await eventsOf(server, other)).find((l) => l.seq < cut)!.seq;

    // Refused forks store nothing.
    const refusals = [
      { at: ofOther, token: ALICE, status: 400, code: 'BAD_SEQ' },
      { at: parentBefore.at(-1)!.seq + 1000, token: ALICE, status: 400, code: 'BAD_SEQ' },
      { at: cut, token: BOB, status: 404, code: 'CONVERSATION_NOT_FOUND' },
    ];
    for (const { at, token, status, code } of refusals) {
      const res = await api<{ error: { code: string } }>(
        server,
        'POST',
        `/api/conversations/${parent}/fork`,
        { at_seq: at },
        token,
      );
      expect({ at, status: res.status, code: res.body?.error?.code }).toEqual({ at, status, code });
    }
    const zero = await api<{ error: { code: string } }>(server, 'POST', `/api/conversations/${parent}/fork`, {
      at_seq: 0,
    });
    expect({ status: zero.status, code: zero.body?.error?.code }).toEqual({ status: 400, code: 'BAD_SEQ' });
    expect(new Set(await listed(server))).toEqual(new Set([parent, other]));

    const forked = await api<{ conversation_id: string }>(server, 'POST', `/api/conversations/${parent}/fork`, {
      at_seq: cut,
    });
    expect(forked.status, forked.text).toBe(201);
    const fork = forked.body.conversation_id;
    expect([parent, other]).not.toContain(fork);

    const copies = throughCut.map((l) => l.event);
    const history = await eventsWhen(server, fork, 'the fork rehydrated', (events) =>
      events.some((e) => e.event.type === 'session_rehydrated'),
    );
    // Copies keep id, ts, cause, source, type and data; only the conversation id is the fork's.
    expect(history.slice(0, copies.length).map((l) => l.event)).toEqual(
      copies.map((e) => ({ ...e, conversation_id: fork })),
    );
    expect(history[copies.length]?.event).toMatchObject({
      id: copies.length,
      conversation_id: fork,
      type: 'conversation_forked',
      data: { conversation_id: parent, seq: cut },
    });
    expect(history[copies.length + 1]?.event).toMatchObject({ id: copies.length + 1, type: 'session_rehydrated' });

    // Lineage, and the list.
    const forkInfo = await info(server, fork);
    expect(forkInfo.status).toBe(200);
    expect(ConversationInfo.parse(forkInfo.body).forked_from).toEqual({ conversation_id: parent, seq: cut });
    expect((await info(server, parent)).body.forked_from).toBeNull();
    expect(await listed(server)).toContain(fork);
    expect(await listed(server, BOB)).not.toContain(fork);
    expect((await info(server, fork, BOB)).status).toBe(404);

    // It goes on by itself: its workspace is a copy of the parent's, and the secret came with it.
    const cat = await say(server, fork, '!cat f.txt');
    expect(outputFor(cat, '!cat f.txt')).toMatchObject({ exit_code: 0, output: 'hi\n' });
    const echoed = await say(server, fork, '!echo "$FORK_SECRET" > g.txt; cat g.txt');
    // The command saw the value: its output is masked, not empty.
    expect(outputFor(echoed, '!echo "$FORK_SECRET" > g.txt; cat g.txt')).toMatchObject({
      exit_code: 0,
      output: '<secret_hidden>\n',
    });
    const answeredInFork = await say(server, fork, 'in the fork');
    expect(
      answeredInFork.filter(
        (e) => e.event.source === 'agent' && e.event.type === 'message' && e.event.data.content.includes('in the fork'),
      ),
    ).toHaveLength(1);
    expect(JSON.stringify(answeredInFork)).not.toContain(SECRET);
    expect(existsSync(join(workspaces, fork, 'g.txt'))).toBe(true);
    expect(existsSync(join(workspaces, parent, 'g.txt'))).toBe(false);

    // Its states fold, from the checkpoints its copy wrote and those its owner wrote since.
    const forkLog = await eventsOf(server, fork);
    await expectCheckpointsAtMultiples(fork, forkLog);
    await expectStatesFold(server, fork, forkLog);

    // The parent is untouched.
    expect(await eventsOf(server, parent)).toEqual(parentBefore);
    expect((await info(server, parent)).body.last_seq).toBe(parentBefore.at(-1)!.seq);
  }, 40_000);
});

describe('a fork killed half-way', () => {
  it('is not listed after a restart, and recovery purges its copies', async () => {
    const dataDir = await e2e.tempDir();
    const env = { TETHER_CHECKPOINT_EVERY: '100' };
    let server = await start(env, dataDir);
    // Queued messages are answered in one task of the agent: room for all of them.
    const parent = await create(server, { secrets: { FORK_SECRET: SECRET }, max_iterations: 10_000 });
    await eventsWhen(server, parent, 'the parent ready', endsAwaiting);
    const secrets = await bucket(DEFAULT_SECRET_BUCKET);
    // Messages sent in small concurrent batches queue up: the agent answers each, waiting for nothing between.
    const MESSAGES = 1_000;
    for (let sent = 0; sent < MESSAGES; sent += 25)
      await Promise.all(Array.from({ length: 25 }, (_, i) => post(server, parent, `message ${sent + i}`)));
    const parentEvents = await eventsWhen(
      server,
      parent,
      'every message answered',
      (events) => userMessages(events) === MESSAGES && endsAwaiting(events),
      30_000,
    );
    const cut = parentEvents.at(-1)!.seq;
    expect(parentEvents.length).toBeGreaterThan(2_000);

    // The first copy on a subject of no known conversation is the fork's: kill -9 right then.
    const known = new Set([`tether.conv.${parent}.events`]);
    let forkSubject: string | undefined;
    const watch = nc.subscribe('tether.conv.*.events', {
      callback: (_err, msg) => {
        if (forkSubject !== undefined || known.has(msg.subject)) return;
        forkSubject = msg.subject;
        server.kill('SIGKILL');
      },
    });
    await nc.flush();
    const forking = await api(server, 'POST', `/api/conversations/${parent}/fork`, { at_seq: cut }).catch(
      (err: unknown) => err,
    );
    // Answered (no copy seen, or the copy outran the kill): stop it anyway, and the checks below say what happened.
    server.kill('SIGKILL');
    const exit = await server.exited;
    watch.unsubscribe();
    expect(forkSubject, `a copy of the fork seen; the fork was answered ${JSON.stringify(forking)}`).toBeDefined();
    expect(forking, 'the fork was never answered').toBeInstanceOf(Error);
    expect(exit.signal).toBe('SIGKILL');
    const fork = forkSubject!.split('.')[2]!;
    // Its secret was kept, and the parent's workspace copied, before its first copy.
    expect((await secrets.get(fork))?.operation).toBe('PUT');
    const forkWorkspace = join(dataDir, 'workspaces', fork);
    expect(existsSync(forkWorkspace)).toBe(true);

    // Really half-way: some copies stored, not all of them.
    const copied = await storedEvents(fork);
    expect(copied).toBeGreaterThan(0);
    expect(copied, `copies stored when killed, of ${parentEvents.length}`).toBeLessThan(parentEvents.length);

    server = await start(env, dataDir);
    await until(
      async () => ((await storedEvents(fork)) === 0 ? true : undefined),
      'recovery to purge the copies of the fork',
      SERVER_WAIT,
    );
    expect(await listed(server)).toEqual([parent]);
    for (const path of [`/api/conversations/${fork}`, `/api/conversations/${fork}/events`]) {
      const res = await api<{ error: { code: string } }>(server, 'GET', path);
      expect({ path, status: res.status, code: res.body?.error?.code }).toEqual({
        path,
        status: 404,
        code: 'CONVERSATION_NOT_FOUND',
      });
    }
    expect(await checkpointSeqs(fork)).toEqual([]);
    // Nothing can reach its workspace: gone too (a deleted conversation's stays).
    expect(existsSync(forkWorkspace)).toBe(false);
    const secret = await secrets.get(fork);
    expect(secret === null || secret.operation !== 'PUT', 'the fork’s secret forgotten').toBe(true);
    // The parent is as it was.
    expect(await eventsOf(server, parent)).toEqual(parentEvents);
  }, 60_000);
});
