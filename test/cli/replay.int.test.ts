import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { natsBinary } from '../support/natsBinary.ts';
import { runTether } from '../support/tetherCli.ts';
import { agentStateOf, foldEvents } from '../../machines/index.ts';
import { StoredEvent } from '../../protocol/index.ts';
import {
  connectNats,
  jetStreamEventLog,
  startEmbeddedNats,
  type EmbeddedNats,
  type NatsConnection,
} from '../../src/store/index.ts';

const conversationId = () => `replay-${randomBytes(6).toString('hex')}`;

/** A small conversation: created, runtime up, one user message answered by the agent. */
function conversation(id: string): StoredEvent[] {
  const at = (n: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString();
  const raw = [
    {
      source: 'user',
      type: 'conversation_created',
      data: { user: 'local', confirmation_mode: false, max_iterations: 5, secret_names: [], replay: false },
    },
    { source: 'environment', type: 'runtime_status', data: { status: 'starting' } },
    { source: 'environment', type: 'runtime_status', data: { status: 'connected' } },
    { source: 'user', type: 'message', data: { content: 'hello' } },
    { source: 'environment', type: 'agent_state_changed', data: { state: 'running' } },
    { source: 'agent', type: 'message', data: { content: 'hi' }, cause: 3 },
    { source: 'environment', type: 'agent_state_changed', data: { state: 'awaiting_user_input' } },
  ];
  return raw.map((e, i) => StoredEvent.parse({ v: 1, id: i, conversation_id: id, ts: at(i), ...e }));
}

async function appendAll(nc: NatsConnection, events: StoredEvent[]): Promise<number[]> {
  const log = await jetStreamEventLog(nc);
  const seqs: number[] = [];
  for (const event of events) seqs.push((await log.append(event, { expectedLastSeq: seqs.at(-1) ?? 0 })).seq);
  return seqs;
}

function paths(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  return Object.entries(value as object).flatMap(([key, child]) => paths(child).map((p) => `${key}.${p}`));
}

/** What the replay must say, from folding the same events here. */
function expectedFold(events: StoredEvent[]) {
  const fold = foldEvents(events, { trace: true });
  const transitions = new Map(
    fold.steps.map((s) => [s.event.eventId, `${paths(s.from).join(', ')} → ${paths(s.to).join(', ')}`]),
  );
  return { fold, transitions, agentState: agentStateOf(fold.snapshot), state: paths(fold.snapshot.value).join(', ') };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('tether replay', () => {
  let dataDir: string;
  let nats: EmbeddedNats;
  let nc: NatsConnection;
  const id = conversationId();
  const events = conversation(id);
  let seqs: number[];

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'tether-replay-'));
    nats = await startEmbeddedNats({ dataDir, binary: natsBinary() });
    nc = await connectNats(nats.url, { name: 'replay-test' });
    seqs = await appendAll(nc, events);
  });

  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  test('prints every stored event with its seq and the transition it caused, then the state and context', async () => {
    const run = await runTether(['replay', id], { NATS_URL: nats.url });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const expected = expectedFold(events);
    const lines = run.stdout.split('\n');
    events.forEach((event, i) => {
      const line = lines.find((l) => l.trimStart().startsWith(`${seqs[i]}  ${event.type} (${event.source})`));
      expect(line, `seq ${seqs[i]}`).toBeDefined();
      const transition = expected.transitions.get(event.id);
      if (transition !== undefined) expect(line!.endsWith(transition), line).toBe(true);
    });
    expect(lines).toContain(`agent    ${expected.agentState}`);
    expect(expected.agentState).toBe('awaiting_user_input');
    expect(lines).toContain(`state    ${expected.state}`);
    expect(run.stdout).toContain('(recorded agent state: running)');
    expect(run.stdout).toContain(`"conversationId": "${id}"`);
  });

  test('with --at SEQ folds only the events up to that stream sequence', async () => {
    const userMessage = seqs[3]!;
    const run = await runTether(['replay', id, '--at', String(userMessage)], { NATS_URL: nats.url });
    expect(run.code).toBe(0);
    const expected = expectedFold(events.slice(0, 4));
    expect(expected.agentState).toBe('running');
    expect(run.stdout).toContain(`agent    ${expected.agentState}`);
    expect(run.stdout).toContain(`through seq ${userMessage} (the log goes on to seq ${seqs.at(-1)})`);
    expect(run.stdout).not.toMatch(new RegExp(`^\\s*${seqs[4]}  `, 'm'));
  });

  test('with --json gives the whole replay as one JSON object', async () => {
    const run = await runTether(['replay', id, '--json'], { NATS_URL: nats.url });
    expect(run.code).toBe(0);
    const report = JSON.parse(run.stdout);
    const expected = expectedFold(events);
    expect(report.steps.map((s: { seq: number }) => s.seq)).toEqual(seqs);
    expect(report.steps[0]).toMatchObject({ type: 'conversation_created', event: 'xstate.init', from: null });
    expect(report).toMatchObject({
      conversation_id: id,
      store: { url: nats.url, origin: 'nats_url' },
      through_seq: seqs.at(-1),
      agent_state: expected.agentState,
      value: expected.fold.snapshot.value,
      context: JSON.parse(JSON.stringify(expected.fold.snapshot.context)),
    });
  });

  test('joins the nats-server already running on TETHER_DATA_DIR instead of starting a second one', async () => {
    const run = await runTether(['replay', id, '--json'], { TETHER_DATA_DIR: dataDir });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report.store).toEqual({ url: nats.url, origin: 'running_embedded' });
    expect(report.steps.map((s: { seq: number }) => s.seq)).toEqual(seqs);
  });

  test('says on stderr that a conversation is unknown, with exit code 1', async () => {
    const missing = conversationId();
    const run = await runTether(['replay', missing], { NATS_URL: nats.url });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`tether replay: unknown conversation ${missing}`);
  });

  test('says when --at is before the conversation’s first event', async () => {
    const run = await runTether(['replay', id, '--at', String(seqs[0]! - 1)], { NATS_URL: nats.url });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`has no event at or before seq ${seqs[0]! - 1}`);
  });

  test('refuses bad arguments with exit code 2 before touching NATS', async () => {
    const unreachable = 'nats://127.0.0.1:1';
    for (const args of [['replay'], ['replay', id, '--at', 'soon'], ['replay', 'a.b'], ['replay', id, '--bogus']]) {
      const run = await runTether(args, { NATS_URL: unreachable });
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toMatch(/^tether replay: .+\nusage: tether replay/);
    }
  });

  test('reports an unreachable NATS_URL with exit code 1', async () => {
    const url = `nats://127.0.0.1:${await freePort()}`;
    const run = await runTether(['replay', id], { NATS_URL: url });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`cannot connect to NATS at ${url}`);
  });

  test('reports a data dir that holds no store, without creating one', async () => {
    const empty = join(dataDir, 'no-such-dir');
    const run = await runTether(['replay', id], { TETHER_DATA_DIR: empty });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`no Tether store at ${join(empty, 'nats')}`);
    await expect(readdir(empty)).rejects.toThrow(/ENOENT/);
  });
});

/** Processes whose command line names `storeDir` (Linux /proc). */
async function processesUsing(storeDir: string): Promise<number[]> {
  const pids = (await readdir('/proc')).filter((name) => /^\d+$/.test(name));
  const found: number[] = [];
  for (const pid of pids) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.split('\0').includes(storeDir)) found.push(Number(pid));
  }
  return found;
}

describe('tether replay on a data dir where no server runs', () => {
  test('starts a nats-server on the store for the read and stops it before exiting', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'tether-replay-'));
    try {
      const id = conversationId();
      const events = conversation(id);
      const nats = await startEmbeddedNats({ dataDir, binary: natsBinary() });
      const nc = await connectNats(nats.url, { name: 'replay-test' });
      const seqs = await appendAll(nc, events);
      await nc.close();
      await nats.stop();

      const run = await runTether(['replay', id, '--json'], { TETHER_DATA_DIR: dataDir });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      const report = JSON.parse(run.stdout);
      expect(report.store.origin).toBe('started_embedded');
      expect(report.store.url).not.toBe(nats.url);
      expect(report.steps.map((s: { seq: number }) => s.seq)).toEqual(seqs);
      expect(report.agent_state).toBe(expectedFold(events).agentState);

      const storeDir = join(dataDir, 'nats');
      expect(await processesUsing(storeDir)).toEqual([]);
      expect((await readdir(storeDir)).filter((name) => name.endsWith('.ports'))).toEqual([]);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
