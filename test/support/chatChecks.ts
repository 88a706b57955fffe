// What chatting clients (ResendingChatter) were told, checked against what was stored
// and what each of their sockets got: for tests that break NATS or nodes under load.
import type { LoggedEvent } from '../../protocol/index.ts';
import type { E2e } from './e2e.ts';
import { answersTo, crashLogProblems, deliveryProblem, untilQuiet, userMessages, type MessageAck } from './faults.ts';
import type { NatsCluster } from './natsCluster.ts';
import { ResendingChatter, type ResendingChatterOptions } from './resendingChatter.ts';
import { createConversation, type ServerProcess, type StartServerOptions } from './serverProcess.ts';
import type { WsClient } from './wsClient.ts';

/** Open sockets catching up with the end of the log, all at once. */
const DELIVERY_TIMEOUT_MS = 10_000;

/**
 * What is wrong with each conversation's log, compared with what its clients
 * sent and were acknowledged: ids not dense, a message stored twice, stored
 * that was never sent, not stored exactly once where its event frame said, or
 * not answered exactly once by the scripted agent.
 */
export function chatLogProblems(
  chatters: readonly ResendingChatter[],
  logs: ReadonlyMap<string, LoggedEvent[]>,
  splitAt: number,
): string[] {
  const acked = new Map<string, MessageAck>();
  for (const chatter of chatters) {
    for (const { content, ack } of chatter.actions) {
      if (!ack) continue;
      // round: 1 when acknowledged before `splitAt` (a kill, a restart), 2 after.
      const round = ack.at < splitAt ? 1 : 2;
      acked.set(content, { conversationId: chatter.conversationId, seq: ack.seq, duplicate: false, round });
    }
  }
  const problems: string[] = [];
  for (const [id, log] of logs) {
    const sent = new Set(
      chatters.filter((c) => c.conversationId === id).flatMap((c) => c.actions.map((action) => action.content)),
    );
    problems.push(...crashLogProblems(id, log, { conversationId: id, acked, sent, before: [] }));
    for (const m of userMessages(log)) {
      const answers = answersTo(log, m.event.data.content).length;
      if (answers !== 1) problems.push(`${id}: "${m.event.data.content}" answered ${answers} times`);
    }
  }
  return problems;
}

/**
 * Every socket got every stored event after its cursor, once and in order: the
 * open ones up to the end of the log, the ones that closed up to their last frame.
 */
export async function chatDeliveryProblems(
  chatters: readonly ResendingChatter[],
  logs: ReadonlyMap<string, LoggedEvent[]>,
): Promise<string[]> {
  const connections = chatters.flatMap((chatter) => chatter.connections.map((connection) => ({ chatter, connection })));
  await Promise.all(
    connections.map(async ({ chatter, connection: { ws } }) => {
      const end = logs.get(chatter.conversationId)!.at(-1)?.seq ?? 0;
      if (ws.isOpen)
        await ws.waitUntil(() => ws.lastSeq() >= end, { timeoutMs: DELIVERY_TIMEOUT_MS }).catch(() => undefined);
    }),
  );
  const problems: string[] = [];
  for (const { chatter, connection } of connections) {
    const problem = deliveryProblem(connection, logs.get(chatter.conversationId)!, connection.ws.isOpen);
    if (problem) problems.push(`${chatter.name}: ${problem}`);
    if (connection.ws.invalid.length > 0)
      problems.push(`${chatter.name}: invalid frames ${JSON.stringify(connection.ws.invalid).slice(0, 300)}`);
  }
  return problems;
}

/**
 * `count` conversations created through `nodes` in turn (each owns its share),
 * left to settle, and a chatter on every node for each of them (so that some
 * clients send through a node that forwards to the owner), each opened: the
 * opens' results, true once caught up. With `failover`, a chatter whose node
 * refuses it connects to the next node.
 */
export async function openChatters(
  nodes: ReadonlyArray<{ name: string; server: ServerProcess }>,
  count: number,
  options: ResendingChatterOptions & { failover?: boolean },
): Promise<{ ids: string[]; chatters: ResendingChatter[]; opened: boolean[] }> {
  const ids = await Promise.all(
    Array.from({ length: count }, (_, c) => createConversation(nodes[c % nodes.length]!.server.baseUrl)),
  );
  await untilQuiet(nodes[0]!.server.baseUrl, ids, { timeoutMs: 30_000, stableMs: 100 });
  const urls = nodes.map(({ server }) => server.wsUrl);
  const chatters = ids.flatMap((id, c) =>
    nodes.map(({ name }, n) => {
      const wsUrls = options.failover ? [...urls.slice(n), ...urls.slice(0, n)] : urls[n]!;
      return new ResendingChatter(wsUrls, id, `c${c}-via-${name}`, options);
    }),
  );
  return { ids, chatters, opened: await Promise.all(chatters.map((c) => c.open())) };
}

/**
 * A timeline the test marks as it goes, printed with the tail of each node's
 * stderr if the test fails.
 */
export function failureTimeline(
  ctx: { onTestFailed(fn: () => void): void },
  nodes: ReadonlyArray<{ name: string; server: ServerProcess }>,
): { startedAt: number; mark: (what: string) => void } {
  const startedAt = Date.now();
  const timeline: string[] = [];
  ctx.onTestFailed(() => {
    console.log(`timeline: ${timeline.join('; ')}`);
    for (const { name, server } of nodes) console.log(`stderr of ${name} (tail):\n${server.stderr().slice(-6_000)}`);
  });
  return { startedAt, mark: (what) => timeline.push(`${Date.now() - startedAt} ms: ${what}`) };
}

/**
 * A cluster of three nats-servers (monitoring on) and a Tether node on it for
 * each name, its stream and buckets on three replicas, logging at info (for
 * the stderr a failure prints); `env` adds to each node's environment. The
 * chatters' sockets go in `sockets`, terminated once the nodes have stopped.
 */
export async function startChatCluster<N extends string>(
  e2e: E2e,
  names: readonly N[],
  env: Record<string, string>,
): Promise<{
  nats: NatsCluster;
  nodes: Map<N, ServerProcess>;
  sockets: WsClient[];
  /** Starts a node that stopped again, as itself: the same data dir, environment and port. */
  startAgain: (name: N) => Promise<ServerProcess>;
}> {
  const nats = await e2e.natsCluster({ monitor: true });
  const sockets: WsClient[] = [];
  e2e.onCleanup(() => Promise.all(sockets.map((s) => s.terminate())));
  const workspaces = await e2e.tempDir();
  const nodes = new Map<N, ServerProcess>();
  const options = new Map<N, StartServerOptions>();
  // All at once on fresh replicated buckets: each waits until the buckets it made or found have a leader.
  await Promise.all(
    names.map(async (name) => {
      const dataDir = await e2e.tempDir();
      const nodeEnv = {
        NATS_URL: nats.url,
        TETHER_REPLICAS: '3',
        TETHER_NODE_ID: name,
        TETHER_WORKSPACES_DIR: workspaces,
        TETHER_LOG_LEVEL: 'info',
        ...env,
      };
      const server = await e2e.start({ dataDir, env: nodeEnv });
      nodes.set(name, server);
      options.set(name, { dataDir, env: nodeEnv, port: server.port });
    }),
  );
  const startAgain = async (name: N) => {
    const server = await e2e.start(options.get(name));
    nodes.set(name, server);
    return server;
  };
  return { nats, nodes, sockets, startAgain };
}
