// A delete removes everything of the conversation, read from NATS and the disk directly, also when
// the server is killed half-way through it and started again.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connectNats, type NatsConnection } from '../../src/store/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import {
  allEvents,
  createConversation,
  eventsWhen,
  http,
  postMessage,
  type ServerProcess,
} from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

const e2e = useE2e();
let nc: NatsConnection;
let jsm: JetStreamManager;
let natsUrl: string;

beforeAll(async () => {
  const nats = await e2e.nats();
  natsUrl = nats.url;
  nc = await connectNats(nats.url, { name: 'delete-test' });
  e2e.onCleanup(() => nc.close());
  jsm = await jetstreamManager(nc);
}, 60_000);

/** Small snapshot and checkpoint intervals, sealed secrets: a conversation leaves something in every store. */
const env = () => ({
  NATS_URL: natsUrl,
  TETHER_SNAPSHOT_EVERY: '3',
  TETHER_CHECKPOINT_EVERY: '3',
  TETHER_SECRETS_KEY: randomKey,
});
const randomKey = randomBytes(32).toString('base64');

/** Every place the id is found: subjects (keys) of every stream, values of the conversation bucket, names on disk. */
async function traces(id: string, dataDir: string): Promise<string[]> {
  const found: string[] = [];
  for await (const stream of jsm.streams.list()) {
    const name = stream.config.name;
    const info = await jsm.streams.info(name, { subjects_filter: '>' });
    for (const subject of Object.keys(info.state.subjects ?? {}))
      if (subject.includes(id)) found.push(`${name}: ${subject}`);
  }
  const kv = await new Kvm(nc).open('tether_conversations');
  for await (const key of await kv.keys()) {
    const value = await kv.get(key);
    if (value?.operation === 'PUT' && value.string().includes(id)) found.push(`tether_conversations value of ${key}`);
  }
  for (const entry of await readdir(dataDir, { recursive: true })) if (entry.includes(id)) found.push(`file ${entry}`);
  return found;
}

async function conversationWithEverything(server: ServerProcess): Promise<string> {
  const id = await createConversation(server.baseUrl, { secrets: { GITHUB_TOKEN: 'ghp_deletetest' } });
  await eventsWhen(server, id, 'ready', endsAwaiting);
  await postMessage(server, id, 'hello');
  await eventsWhen(server, id, 'answered', (events) => endsAwaiting(events) && events.length > 8);
  return id;
}

describe('DELETE /api/conversations/:id', () => {
  it('leaves the id in no stream, bucket key or folder; a fork stays whole; ?keep_workspace=true keeps the folder', async () => {
    const dataDir = await e2e.tempDir();
    const server = await e2e.start({ dataDir, env: env() });
    const id = await conversationWithEverything(server);
    const fork = (
      await http<{ conversation_id: string }>(server.baseUrl, 'POST', `/api/conversations/${id}/fork`, {
        at_seq: (await allEvents(server.baseUrl, id)).at(-1)!.seq,
      })
    ).body.conversation_id;
    await eventsWhen(server, fork, 'the fork stored', (events) =>
      events.some((e) => e.event.type === 'conversation_forked'),
    );
    const before = await traces(id, dataDir);
    // The check sees what a conversation keeps: events, entry, order, owner, snapshot, checkpoints, secrets, workspace.
    for (const where of ['TETHER_EVENTS', 'KV_tether_conversations', 'KV_tether_owners', 'KV_tether_snapshots'])
      expect(
        before.some((t) => t.startsWith(where)),
        `${where} in ${before.join(', ')}`,
      ).toBe(true);
    for (const where of ['KV_tether_checkpoints', 'KV_tether_secrets', 'file workspaces'])
      expect(
        before.some((t) => t.startsWith(where)),
        `${where} in ${before.join(', ')}`,
      ).toBe(true);
    const forkEvents = await allEvents(server.baseUrl, fork);

    expect((await http(server.baseUrl, 'DELETE', `/api/conversations/${id}`)).status).toBe(204);
    expect(await traces(id, dataDir)).toEqual([]);
    expect((await http(server.baseUrl, 'GET', `/api/conversations/${id}`)).status).toBe(404);
    // The fork is its own conversation: untouched, and deleted alone.
    expect(await allEvents(server.baseUrl, fork)).toEqual(forkEvents);
    expect(existsSync(join(dataDir, 'workspaces', fork))).toBe(true);
    expect((await http(server.baseUrl, 'DELETE', `/api/conversations/${fork}?keep_workspace=true`)).status).toBe(204);
    expect(await traces(fork, dataDir)).toEqual([`file workspaces/${fork}`]);
    expect((await http(server.baseUrl, 'DELETE', `/api/conversations/${fork}?keep_workspace=maybe`)).status).toBe(400);
  }, 90_000);

  it('is finished by the restarted server when a kill -9 cut it half-way', async () => {
    const dataDir = await e2e.tempDir();
    const server = await e2e.start({ dataDir, env: env() });
    const id = await conversationWithEverything(server);
    // A workspace of many files: its removal, after the events went, is where the kill lands.
    const workspace = join(dataDir, 'workspaces', id);
    for (let d = 0; d < 10; d++) {
      await mkdir(join(workspace, `d${d}`), { recursive: true });
      await Promise.all(Array.from({ length: 1000 }, (_, i) => writeFile(join(workspace, `d${d}`, `f${i}`), 'x')));
    }
    const deleting = http(server.baseUrl, 'DELETE', `/api/conversations/${id}`).catch(() => undefined);
    await until(
      async () => {
        const info = await jsm.streams.info('TETHER_EVENTS', { subjects_filter: `>` });
        return !Object.keys(info.state.subjects ?? {}).some((s) => s.includes(id));
      },
      'the events to be purged',
      { timeoutMs: 30_000, everyMs: 2 },
    );
    server.kill('SIGKILL');
    expect((await server.exited).signal).toBe('SIGKILL');
    await deleting;
    const cut = await traces(id, dataDir);
    // Half-way: the delete is recorded and not all of it is gone.
    expect(cut).toContain(`KV_tether_conversations: $KV.tether_conversations.d.${id}`);
    expect(cut.some((t) => t.startsWith('file workspaces'))).toBe(true);

    // At info: its log says what recovery did, should the wait time out.
    const again = await e2e.start({ dataDir, env: { ...env(), TETHER_LOG_LEVEL: 'info' } });
    let left: string[] = [];
    await until(
      async () => (left = await traces(id, dataDir)).length === 0,
      () =>
        `the restarted server to finish the delete; left: ${left.slice(0, 5).join(', ')}; its log:\n${again.stderr()}`,
      // Twice the usual wait: on a loaded CI machine this has run out at 30 s with nothing failed in its log.
      { ...SERVER_WAIT, timeoutMs: 60_000 },
    );
    expect((await http(again.baseUrl, 'GET', `/api/conversations/${id}`)).status).toBe(404);
  }, 120_000);
});
