import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ConversationInfo, EventOf, LoggedEvent } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting, repliesTo, stateOf } from '../support/logQueries.ts';
import type { NatsCluster } from '../support/natsCluster.ts';
import { bashesIn } from '../support/processes.ts';
import {
  allEvents,
  createConversation,
  eventsWhen,
  http,
  postMessage,
  type ServerProcess,
  startServer,
} from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';
import type { EventFrame } from '../support/wsClient.ts';

// Three `tether serve` processes on a 3-node NATS cluster: one owner per
// conversation, any node serving any client, failover by heartbeat.
const LEASE_MS = 1_000;
const AGENT_DELAY_MS = 400;
const SECRETS_KEY = randomBytes(32).toString('base64');
const SECRET = 'tok-Cl9x-cluster-secret-value';
const NODES = ['n1', 'n2', 'n3'] as const;
type NodeName = (typeof NODES)[number];

const e2e = useE2e();
let nats: NatsCluster;
let workspaces: string;
const dataDirs = new Map<NodeName, string>();
/**
 * The nodes live for the whole file: one that a test stopped is started again before the next test
 * (with startServer: the fixture would stop a server started in a test's hook with that test).
 */
const nodes = new Map<NodeName, ServerProcess>();

async function startNode(name: NodeName): Promise<ServerProcess> {
  const server = await startServer({
    dataDir: dataDirs.get(name)!,
    env: {
      NATS_URL: nats.url,
      TETHER_NODE_ID: name,
      TETHER_LEASE_MS: String(LEASE_MS),
      TETHER_WORKSPACES_DIR: workspaces,
      // Each agent step takes a moment, so that a drain finds one under way and waits for it.
      TETHER_AGENT_DELAY_MS: String(AGENT_DELAY_MS),
      TETHER_SECRETS_KEY: SECRETS_KEY,
    },
  });
  nodes.set(name, server);
  return server;
}

const node = (name: NodeName) => nodes.get(name)!;

beforeAll(async () => {
  nats = await e2e.natsCluster();
  workspaces = await e2e.tempDir();
  for (const name of NODES) dataDirs.set(name, await e2e.tempDir());
  e2e.onCleanup(() => Promise.all([...nodes.values()].map((s) => s.stop())));
  await Promise.all(NODES.map((name) => startNode(name)));
}, 90_000);

beforeEach(async () => {
  // A node an earlier test stopped starts again: every test begins with three (and none waits after the last).
  for (const name of NODES) {
    const server = nodes.get(name)!;
    if (await hasExited(server)) await startNode(name);
  }
}, 60_000);

async function hasExited(server: ServerProcess): Promise<boolean> {
  return Promise.race([server.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 10))]);
}

const listen = (server: ServerProcess, id: string, afterSeq?: number) => e2e.connect(server, id, { afterSeq });

async function readyConversation(server: ServerProcess): Promise<string> {
  const id = await createConversation(server.baseUrl);
  await eventsWhen(server, id, `${id} ready`, endsAwaiting);
  return id;
}

const asLogged = (f: EventFrame): LoggedEvent => ({ seq: f.seq, event: f.event });

type Output = LoggedEvent & { event: EventOf<'command_output'> };
const outputsOf = (events: readonly LoggedEvent[]): Output[] =>
  events.filter((e): e is Output => e.event.type === 'command_output');

function expectDenseIds(events: readonly LoggedEvent[]): void {
  expect(events.map((e) => e.event.id)).toEqual(events.map((_, i) => i));
}

/** Which nodes hold the conversation in memory, by their own answer. */
async function holders(id: string): Promise<NodeName[]> {
  const found: NodeName[] = [];
  for (const name of NODES) {
    const info = await http<ConversationInfo>(node(name).baseUrl, 'GET', `/api/conversations/${id}`);
    expect(info.status).toBe(200);
    if (info.body.in_memory) found.push(name);
  }
  return found;
}

/** The command's mark in the shared workspace: it started. */
async function untilMarked(id: string, mark: string): Promise<void> {
  await until(
    async () =>
      (await readFile(join(workspaces, id, 'marks.txt'), 'utf8').catch(() => '')).includes(mark) ? true : undefined,
    `the command of ${id} to start`,
    SERVER_WAIT,
  );
}

/** After the interrupted command: exactly one output, interrupted, and the agent's summary of it; the task ends. */
function expectInterruptedOnce(events: readonly LoggedEvent[]): void {
  const outputs = outputsOf(events);
  expect(outputs).toHaveLength(1);
  expect(outputs[0]!.event.data.exit_code).toBeNull();
  expect(outputs[0]!.event.data.output).toMatch(/^interrupted/);
  expect(events.filter((e) => e.event.type === 'command')).toHaveLength(1);
  expect(endsAwaiting(events)).toBe(true);
  expectDenseIds(events);
}

describe('a Tether cluster of three nodes', () => {
  it('clients on all three nodes see every event once and in order; actions through non-owners are answered by the owner', async () => {
    const id = await readyConversation(node('n1'));
    const clients = await Promise.all(NODES.map((name) => listen(node(name), id)));
    // Through n3's socket, then n2's REST: both forwarded to n1, the owner.
    clients[2]!.sendMessage('hello from n3');
    await eventsWhen(node('n2'), id, 'the answer to n3', (e) => repliesTo(e, 'hello from n3').length === 1);
    await postMessage(node('n2'), id, '!seq 1 200');
    const log = await eventsWhen(
      node('n3'),
      id,
      'the command and its summary',
      (e) => outputsOf(e).length === 1 && endsAwaiting(e),
    );
    for (const client of clients) {
      await client.waitUntil(() => client.lastSeq() >= log.at(-1)!.seq, { what: 'every event' });
      expect(client.events().map(asLogged)).toEqual(log);
      expect(client.invalid).toEqual([]);
    }
    expect(outputsOf(log)[0]!.event.data.exit_code).toBe(0);
    expectDenseIds(log);
    expect(await holders(id)).toEqual(['n1']);
  });

  it('kill -9 of the owner mid-command: another node reports the command interrupted once and finishes the task; a client moved there with its cursor gets every event once', async () => {
    const id = await readyConversation(node('n1'));
    const before = await listen(node('n1'), id);
    await postMessage(node('n1'), id, '!echo started >> marks.txt; sleep 30; echo never');
    await untilMarked(id, 'started');
    const killedAt = Date.now();
    node('n1').kill('SIGKILL');
    await node('n1').exited;
    await before.closed;
    // The client moves to n2 with the cursor of the last event it had.
    const cursor = before.lastSeq();
    const after = await listen(node('n2'), id, cursor);
    const log = await eventsWhen(
      node('n3'),
      id,
      'the task finished on a survivor',
      (e) => outputsOf(e).length === 1 && endsAwaiting(e),
    );
    expectInterruptedOnce(log);
    const taken = log.find((e) => e.event.type === 'session_rehydrated')!;
    expect(Date.parse(taken.event.ts) - killedAt).toBeGreaterThan(LEASE_MS * 0.5);
    await after.waitUntil(() => after.lastSeq() >= log.at(-1)!.seq, { what: 'every event on n2' });
    expect([...before.events(), ...after.events()].map(asLogged)).toEqual(log);
    expect(bashesIn(join(workspaces, id))).toEqual([]);
    const held = await until(
      async () => {
        const found = (
          await Promise.all(
            ['n2', 'n3'].map(async (name) => {
              const info = await http<ConversationInfo>(
                node(name as NodeName).baseUrl,
                'GET',
                `/api/conversations/${id}`,
              );
              return info.body.in_memory ? name : null;
            }),
          )
        ).filter((n) => n !== null);
        return found.length > 0 ? found : undefined;
      },
      'a survivor holds it',
      SERVER_WAIT,
    );
    expect(held).toHaveLength(1);
  });

  it('SIGSTOP of the owner mid-command for three leases: its command dies first, another node takes over and answers, and after SIGCONT the old owner writes nothing', async () => {
    const id = await readyConversation(node('n2'));
    await postMessage(node('n2'), id, '!echo started >> marks.txt; sleep 30; echo never');
    await untilMarked(id, 'started');
    const workspace = join(workspaces, id);
    expect(bashesIn(workspace).length).toBeGreaterThan(0);
    node('n2').kill('SIGSTOP');
    const stoppedAt = Date.now();
    try {
      const goneAt = await until(
        async () => (bashesIn(workspace).length === 0 ? Date.now() : undefined),
        "the frozen node's shell to die",
        { ...SERVER_WAIT, timeoutMs: 10_000 },
      );
      expect(goneAt - stoppedAt).toBeLessThan(LEASE_MS * 1.5);
      // An action through n3 is answered meanwhile: n3 (or n1) takes the conversation over.
      await postMessage(node('n3'), id, 'are you there?');
      const log = await eventsWhen(
        node('n1'),
        id,
        'the answer after the takeover',
        (e) => repliesTo(e, 'are you there?').length === 1 && endsAwaiting(e),
      );
      const taken = log.find((e) => e.event.type === 'session_rehydrated')!;
      expect(Date.parse(taken.event.ts)).toBeGreaterThan(goneAt);
      expect(outputsOf(log)).toHaveLength(1);
      expect(outputsOf(log)[0]!.event.data.output).toMatch(/^interrupted/);
      const rest = 3 * LEASE_MS - (Date.now() - stoppedAt);
      if (rest > 0) await new Promise((r) => setTimeout(r, rest));
    } finally {
      node('n2').kill('SIGCONT');
    }
    const settled = await allEvents(node('n1').baseUrl, id);
    // Two leases for the old owner to wake, see its lease lapsed, and (it must not) write.
    await new Promise((r) => setTimeout(r, 2 * LEASE_MS));
    const later = await allEvents(node('n1').baseUrl, id);
    expect(later).toEqual(settled);
    expectDenseIds(later);
    expect(later.filter((e) => e.event.type === 'session_rehydrated')).toHaveLength(1);
    expect(bashesIn(workspace)).toEqual([]);
    // The old owner is a healthy node again, and forwards to the new owner.
    await postMessage(node('n2'), id, 'and now?');
    await eventsWhen(
      node('n2'),
      id,
      'the answer through n2',
      (e) => repliesTo(e, 'and now?').length === 1 && endsAwaiting(e),
    );
    expectDenseIds(await allEvents(node('n2').baseUrl, id));
  });

  it('a secret set through one node is in the runtime of the node that takes over after it dies, and masked in what that node stores', async () => {
    const created = await http<{ conversation_id: string }>(node('n1').baseUrl, 'POST', '/api/conversations', {
      secrets: { MY_TOKEN: SECRET },
    });
    expect(created.status, created.text).toBe(201);
    const id = created.body.conversation_id;
    await eventsWhen(node('n1'), id, 'ready', endsAwaiting);
    await postMessage(node('n1'), id, '!echo "first=$MY_TOKEN"');
    await eventsWhen(node('n1'), id, 'the first output', (e) => outputsOf(e).length === 1 && endsAwaiting(e));
    node('n1').kill('SIGKILL');
    await node('n1').exited;
    await postMessage(node('n2'), id, '!echo "second=$MY_TOKEN"');
    const log = await eventsWhen(
      node('n2'),
      id,
      'the second output',
      (e) => outputsOf(e).length === 2 && endsAwaiting(e),
    );
    // The new owner's runtime had the value (the output is masked, not empty), and nothing stored holds it.
    expect(outputsOf(log).map((e) => e.event.data.output)).toEqual([
      'first=<secret_hidden>\n',
      'second=<secret_hidden>\n',
    ]);
    expect(log.find((e) => e.event.type === 'session_rehydrated')).toBeDefined();
    expect(JSON.stringify(log)).not.toContain(SECRET);
    for (const name of NODES) expect(node(name).stderr()).not.toContain(SECRET);
  });

  it('SIGTERM drains a node: its running command and the agent step after it finish, its clients are closed with 1001 and get every event once from another node', async () => {
    const id = await readyConversation(node('n3'));
    const client = await listen(node('n3'), id);
    await postMessage(node('n3'), id, '!echo started >> marks.txt; sleep 0.3; echo finished');
    await untilMarked(id, 'started');
    const stopping = node('n3').stop();
    const close = await client.closed;
    expect(close.code).toBe(1001);
    expect((await stopping).code).toBe(0);
    const moved = await listen(node('n1'), id, client.lastSeq());
    const log = await eventsWhen(
      node('n1'),
      id,
      'the summary of the command, then the session leaving n3',
      (e) => outputsOf(e).length === 1 && e.some((x) => x.event.type === 'session_passivated'),
    );
    // The drain waited (up to a lease) for the command and for the agent step after it (0.3 + 0.4 s):
    // the summary was stored on n3 before the session left, waiting for the user.
    expect(outputsOf(log)[0]!.event.data).toMatchObject({ exit_code: 0, output: 'finished\n' });
    const left = log.findIndex((e) => e.event.type === 'session_passivated');
    expect(log[left]!.event.data).toEqual({ reason: 'shutdown', state: 'awaiting_user_input' });
    const output = log.findIndex((e) => e.event.type === 'command_output');
    expect(repliesAfter(log.slice(0, left), output)).toHaveLength(1);
    expect(log.filter((e) => e.event.type === 'agent_attempt')).toEqual([]);
    const cursor = client.lastSeq();
    await moved.waitUntil(() => moved.lastSeq(cursor) >= log.at(-1)!.seq, { what: 'every event after the move' });
    expect([...client.events(), ...moved.events()].map(asLogged)).toEqual(log);
    expect(stateOf(log)).toBe('awaiting_user_input');
    expectDenseIds(log);
  });
});

/** The agent's messages after position `index` of the log. */
function repliesAfter(log: readonly LoggedEvent[], index: number): LoggedEvent[] {
  return log.slice(index + 1).filter((e) => e.event.source === 'agent' && e.event.type === 'message');
}
