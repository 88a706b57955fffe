import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoredEvent } from '../../protocol/index.ts';
import { natsBinary } from '../support/natsBinary.ts';
import {
  allEvents,
  createConversation,
  eventsWhen,
  freePort,
  postMessage,
  startServer,
  type ServerProcess,
} from '../support/serverProcess.ts';
import { until } from '../support/until.ts';

/*
 * The shipped NATS configuration (deploy/nats/tether.conf, issue 27): a node
 * with the `tether` user serves a conversation end to end; the `subscriber`
 * user follows it live and from the stream, and is refused when it writes
 * anything Tether reads (an event, a KV key, a forwarded action).
 */

const CONF = resolve(import.meta.dirname, '../../deploy/nats/tether.conf');
const BIN = resolve(import.meta.dirname, '../../bin/tether.js');
const PASSWORDS = {
  TETHER_NATS_PASSWORD: 'node-pw-6f1c',
  SUBSCRIBER_NATS_PASSWORD: 'reader-pw-2b9e',
};

const dir = mkdtempSync(join(tmpdir(), 'tether-nats-users-'));
let nats: ChildProcess;
let natsUrl: string;
let server: ServerProcess;
let reader: NatsConnection;

function listening(port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = connectTcp(port, '127.0.0.1', () => done(socket.end() !== undefined));
    socket.on('error', () => done(false));
  });
}

beforeAll(async () => {
  const port = await freePort();
  const args = ['-js', '-c', CONF, '-a', '127.0.0.1', '-p', String(port), '--store_dir', dir];
  nats = spawn(natsBinary(), args, { env: { ...process.env, ...PASSWORDS }, stdio: 'ignore' });
  natsUrl = `nats://127.0.0.1:${port}`;
  await until(() => listening(port), 'the nats-server');
  server = await startServer({
    env: { NATS_URL: natsUrl, NATS_USER: 'tether', NATS_PASSWORD: PASSWORDS.TETHER_NATS_PASSWORD },
  });
  reader = await connect({
    servers: natsUrl,
    user: 'subscriber',
    pass: PASSWORDS.SUBSCRIBER_NATS_PASSWORD,
    inboxPrefix: '_INBOX_subscriber',
  });
}, 60_000);

afterAll(async () => {
  await reader?.close();
  await server?.stop();
  nats?.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** Whatever the call ends with, as text: the result, or the error's message. */
async function outcome(work: Promise<unknown>): Promise<string> {
  return work.then(
    () => 'done',
    (err: Error) => err.message,
  );
}

describe('the shipped NATS users', () => {
  it('serve a conversation end to end through a node with the tether user', async () => {
    const id = await createConversation(server.baseUrl, { initial_message: 'hello' });
    const events = await eventsWhen(server, id, 'the answer', (e) =>
      e.some((l) => l.event.source === 'agent' && l.event.type === 'message'),
    );
    expect(events[0]!.event.type).toBe('conversation_created');
  });

  it('let the subscriber follow a conversation live and from the stream', async () => {
    const id = await createConversation(server.baseUrl, {});
    const subject = `tether.conv.${id}.events`;
    const live = reader.subscribe(subject);
    const seen: StoredEvent[] = [];
    void (async () => {
      for await (const msg of live) seen.push(StoredEvent.parse(msg.json()));
    })();
    await reader.flush();
    await postMessage(server, id, 'read me');
    await until(() => seen.some((e) => e.type === 'message' && e.data.content === 'read me'), 'the live event');
    live.unsubscribe();

    const stored = await allEvents(server.baseUrl, id);
    const consumer = await jetstream(reader).consumers.get('TETHER_EVENTS', { filter_subjects: subject });
    const replayed: StoredEvent[] = [];
    while (replayed.length < stored.length) {
      const msg = await consumer.next({ expires: 2_000 });
      if (!msg) break;
      replayed.push(StoredEvent.parse(msg.json()));
    }
    expect(replayed.map((e) => e.id)).toEqual(stored.map((l) => l.event.id));
  });

  it('stop a node whose password is wrong at start, with the variable and the reason, never the password', async () => {
    const dataDir = mkdtempSync(join(dir, 'node-'));
    const wrong = `${PASSWORDS.TETHER_NATS_PASSWORD}-x`;
    const env = { ...process.env, NATS_URL: natsUrl, NATS_USER: 'tether', NATS_PASSWORD: wrong };
    const child = spawn(process.execPath, [BIN, 'serve'], {
      env: { ...env, TETHER_HOST: '127.0.0.1', TETHER_PORT: '0', TETHER_DATA_DIR: dataDir },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((done) => child.once('exit', done));
    expect(code).toBe(1);
    expect(stderr).toMatch(/NATS refused NATS_USER\/NATS_PASSWORD\): Authorization Violation/);
    expect(stderr).not.toContain(wrong);
  });

  it('refuse the subscriber an event, a KV key and a forwarded action, and store nothing', async () => {
    const id = await createConversation(server.baseUrl, {});
    const before = await eventsWhen(server, id, 'the start', (e) =>
      e.some((l) => l.event.type === 'agent_state_changed' && l.event.data.state === 'awaiting_user_input'),
    );
    const fake = { ...before[0]!.event, id: before.length };
    const js = jetstream(reader, { timeout: 2_000 });
    expect(await outcome(js.publish(`tether.conv.${id}.events`, JSON.stringify(fake)))).toMatch(/permission/i);
    expect(await outcome(new Kvm(reader).open('tether_conversations').then((kv) => kv.put(id, '{}')))).toMatch(
      /permission/i,
    );
    const forwarded = reader.request(`tether.node.${Buffer.from('any-node').toString('base64url')}`, '{}', {
      timeout: 2_000,
    });
    expect(await outcome(forwarded)).toMatch(/permission/i);
    expect((await allEvents(server.baseUrl, id)).length).toBe(before.length);
  });
});
