// A Tether cluster for the bench: a 3-node NATS cluster on loopback
// (test/support/natsCluster.ts), three `tether serve` nodes on it
// (failoverNodes.ts) sharing one workspaces folder, one token and user per
// conversation, and the bench's own NATS connection. The failover step (j) and
// the cluster step (k, l) run on it.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectNats, type NatsConnection } from '../src/store/index.ts';
import { startNatsCluster, type NatsCluster } from '../test/support/natsCluster.ts';
import { freePort } from '../test/support/serverProcess.ts';
import { TetherNode } from './failoverNodes.ts';

export interface TetherClusterOptions {
  /** Names the step's temporary folders, tokens and users (`<label>-<i>`, `<label>-user-<i>`). */
  label: string;
  /** Tokens (and users) to make, one per conversation: default limits apply per user. */
  users: number;
  /** What every node reads besides NATS_URL, TETHER_WORKSPACES_DIR and TETHER_TOKENS. */
  env: Record<string, string>;
}

export interface TetherCluster {
  nats: NatsCluster;
  /** node-a, node-b, node-c, started in that order. */
  nodes: readonly [TetherNode, TetherNode, TetherNode];
  tokens: readonly string[];
  workspaces: string;
  /** The bench's own connection to the NATS cluster. */
  nc: NatsConnection;
  /** Stops the nodes (SIGTERM), the connection and the NATS cluster, last started first, and removes their folders. */
  stop: () => Promise<void>;
}

/** The NATS cluster, then the three nodes; whatever started is stopped again when a later step fails. */
export async function startTetherCluster(options: TetherClusterOptions): Promise<TetherCluster> {
  const { label } = options;
  const undo: Array<() => Promise<unknown>> = [];
  const stop = async () => {
    for (const step of undo.splice(0).reverse()) await step().catch(() => undefined);
  };
  try {
    const nats: NatsCluster = await startNatsCluster();
    undo.push(() => nats.stop());
    const workspaces = await mkdtemp(join(tmpdir(), `tether-bench-${label}-ws-`));
    undo.push(() => rm(workspaces, { recursive: true, force: true }));
    const tokens = Array.from({ length: options.users }, (_, i) => `${label}-${i}`);
    const env = {
      ...options.env,
      NATS_URL: nats.url,
      TETHER_WORKSPACES_DIR: workspaces,
      TETHER_TOKENS: tokens.map((t, i) => `${t}:${label}-user-${i}`).join(','),
    };
    const nodes: TetherNode[] = [];
    for (const name of ['node-a', 'node-b', 'node-c']) {
      const dataDir = await mkdtemp(join(tmpdir(), `tether-bench-${label}-${name}-`));
      undo.push(() => rm(dataDir, { recursive: true, force: true }));
      const node = await TetherNode.start({ name, port: await freePort(), dataDir, env });
      undo.push(() => node.stop());
      nodes.push(node);
    }
    const nc = await connectNats(nats.url, { name: `tether-bench-${label}` });
    undo.push(() => nc.close());
    return { nats, nodes: [nodes[0]!, nodes[1]!, nodes[2]!], tokens, workspaces, nc, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
