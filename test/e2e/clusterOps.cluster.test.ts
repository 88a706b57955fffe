import { beforeAll, describe, expect, it } from 'vitest';
import type { ClusterView, ConversationInfo, ConversationOwner } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import type { NatsCluster } from '../support/natsCluster.ts';
import { endsAwaiting, repliesTo, stateOf } from '../support/logQueries.ts';
import { http, postMessage, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

// Two `tether serve` nodes with public URLs on a 3-node NATS cluster (replicas 3):
// what an operator reads of the cluster, its metrics, and the per-user cap across nodes.
const LEASE_MS = 1_000;
const ALICE = 'tok-alice';
const BOB = 'tok-bob';

const e2e = useE2e();
let nats: NatsCluster;
let workspaces: string;
let a: ServerProcess;
let b: ServerProcess;

async function startNode(name: string): Promise<ServerProcess> {
  return e2e.start({
    env: {
      NATS_URL: nats.url,
      TETHER_REPLICAS: '3',
      TETHER_NODE_ID: name,
      TETHER_PUBLIC_URL: `https://${name}.tether.test`,
      TETHER_LEASE_MS: String(LEASE_MS),
      TETHER_WORKSPACES_DIR: workspaces,
      TETHER_TOKENS: `${ALICE}:alice,${BOB}:bob`,
      // One running conversation per user across the cluster; an agent step stays running a while.
      TETHER_MAX_RUNNING_PER_USER: '1',
      TETHER_AGENT_DELAY_MS: '1500',
    },
  });
}

beforeAll(async () => {
  nats = await e2e.natsCluster();
  workspaces = await e2e.tempDir();
  [a, b] = await Promise.all([startNode('node-a'), startNode('node-b')]);
}, 90_000);

async function create(server: ServerProcess, token: string): Promise<string> {
  const res = await http<{ conversation_id: string }>(server.baseUrl, 'POST', '/api/conversations', {}, token);
  expect(res.status, res.text).toBe(201);
  const id = res.body.conversation_id;
  await until(async () => endsAwaiting(await allEventsAs(server, id, token)), `${id} ready`, SERVER_WAIT);
  return id;
}

async function allEventsAs(server: ServerProcess, id: string, token: string) {
  const res = await http<{ items: Parameters<typeof endsAwaiting>[0] }>(
    server.baseUrl,
    'GET',
    `/api/conversations/${id}/events?limit=1000`,
    undefined,
    token,
  );
  expect(res.status, res.text).toBe(200);
  return res.body.items;
}

/** One sample of a metric from a node's `/metrics` (0 when absent). */
async function metric(server: ServerProcess, name: string, labels = ''): Promise<number> {
  const res = await http(server.baseUrl, 'GET', '/metrics');
  expect(res.status).toBe(200);
  expect(res.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
  const line = res.text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

describe('operating a cluster', () => {
  it('GET /api/cluster lists both nodes with their public URLs and heartbeats to any authenticated user', async () => {
    expect((await http(a.baseUrl, 'GET', '/api/cluster')).status).toBe(401);
    for (const [server, self] of [
      [a, 'node-a'],
      [b, 'node-b'],
    ] as const) {
      const res = await http<ClusterView>(server.baseUrl, 'GET', '/api/cluster', undefined, BOB);
      expect(res.status, res.text).toBe(200);
      expect(res.body.node_id).toBe(self);
      expect(res.body.nodes.map((n) => [n.node_id, n.url])).toEqual([
        ['node-a', 'https://node-a.tether.test'],
        ['node-b', 'https://node-b.tether.test'],
      ]);
      for (const node of res.body.nodes) {
        // Renewed every lease/4: never older than a lease.
        expect(Date.now() - Date.parse(node.last_heartbeat)).toBeLessThan(LEASE_MS + 500);
        expect(node.live_sessions).toBeGreaterThanOrEqual(0);
      }
    }
  });

  it('says which node owns a conversation, to its user only, and counts the work in /metrics', async () => {
    const appendsBefore = await metric(a, 'tether_appends_total', '{result="ok"}');
    const forwardedBefore = await metric(b, 'tether_forwarded_actions_total');
    const id = await create(a, ALICE);

    const info = await http<ConversationInfo>(b.baseUrl, 'GET', `/api/conversations/${id}`, undefined, ALICE);
    expect(info.status, info.text).toBe(200);
    expect(info.body.owner).toBe('node-a');
    const owner = await http<ConversationOwner>(b.baseUrl, 'GET', `/api/cluster?conversation=${id}`, undefined, ALICE);
    expect(owner.status, owner.text).toBe(200);
    expect(owner.body).toMatchObject({
      conversation_id: id,
      owner: { node_id: 'node-a', url: 'https://node-a.tether.test' },
    });
    // Another user's conversation is as unknown as a missing one.
    expect((await http(b.baseUrl, 'GET', `/api/cluster?conversation=${id}`, undefined, BOB)).status).toBe(404);
    expect((await http(b.baseUrl, 'GET', '/api/cluster?conversation=not%20an%20id', undefined, ALICE)).status).toBe(
      400,
    );

    const client = await e2e.connect(b, id, { token: ALICE });
    expect(await metric(b, 'tether_connections')).toBe(1);
    // Through the node that does not own it: forwarded to node-a, which appends and answers.
    const appendsBeforeMessage = await metric(a, 'tether_appends_total', '{result="ok"}');
    await postMessage(b, id, 'hello', ALICE);
    expect(await metric(b, 'tether_forwarded_actions_total')).toBe(forwardedBefore + 1);
    await until(
      async () => (repliesTo(await allEventsAs(a, id, ALICE), 'hello').length > 0 ? true : undefined),
      'the forwarded message answered',
      SERVER_WAIT,
    );
    // The user message, the state facts and the reply: each one append on node-a, none on node-b.
    expect(await metric(a, 'tether_appends_total', '{result="ok"}')).toBeGreaterThanOrEqual(appendsBeforeMessage + 3);
    expect(await metric(b, 'tether_appends_total', '{result="ok"}')).toBe(0);
    expect(await metric(a, 'tether_appends_total', '{result="ok"}')).toBeGreaterThan(appendsBefore + 3);
    expect(await metric(a, 'tether_append_seconds_count')).toBeGreaterThan(appendsBefore + 3);
    expect(await metric(a, 'tether_live_sessions')).toBeGreaterThanOrEqual(1);
    expect(await metric(a, 'tether_owned_conversations')).toBeGreaterThanOrEqual(1);
    expect(await metric(b, 'tether_live_sessions')).toBe(0);
    expect(await metric(a, 'tether_process_resident_memory_bytes')).toBeGreaterThan(0);
    await client.terminate();
  });

  it("caps a user's running conversations across nodes: one that starts running on node-b sends the one running on node-a out of memory", async () => {
    const first = await create(a, BOB);
    const second = await create(b, BOB);
    await postMessage(a, first, 'first', BOB);
    await until(
      async () => (stateOf(await allEventsAs(a, first, BOB)) === 'running' ? true : undefined),
      `${first} running`,
      SERVER_WAIT,
    );
    await postMessage(b, second, 'second', BOB);
    const events = await until(
      async () => {
        const all = await allEventsAs(b, first, BOB);
        return all.some((e) => e.event.type === 'session_passivated') ? all : undefined;
      },
      `${first} to leave node-a`,
      SERVER_WAIT,
    );
    expect(events.find((e) => e.event.type === 'session_passivated')?.event).toMatchObject({
      data: { reason: 'too_many_running' },
    });
    const info = await http<ConversationInfo>(a.baseUrl, 'GET', `/api/conversations/${first}`, undefined, BOB);
    expect(info.body.in_memory).toBe(false);
    const second_info = await http<ConversationInfo>(a.baseUrl, 'GET', `/api/conversations/${second}`, undefined, BOB);
    expect(second_info.body.owner).toBe('node-b');
  });
});
