// What `npm run cluster` starts: the settings it reads, the ports it takes, and each
// nats-server's arguments and each Tether node's environment. scripts/cluster.js runs it.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';

export const SIZE = 3;
/** Kept across runs: JetStream knows its peers by server name, and the stores remember them. */
const NATS_CLUSTER_NAME = 'tether';

export class ClusterError extends Error {
  name = 'ClusterError';
}

/**
 * The cluster's settings, from the same variables (and defaults) as `tether serve`;
 * `notes` are what the user should be told about them.
 */
export function readSettings(env) {
  const notes = [];
  const dataDir = resolve(env.TETHER_DATA_DIR || './.tether');
  const base = env.TETHER_PORT ? Number(env.TETHER_PORT) : 3000;
  if (!Number.isInteger(base) || base < 1 || base > 65_535 - (SIZE - 1))
    throw new ClusterError(`TETHER_PORT=${env.TETHER_PORT}: the cluster takes it and the next two ports; use 1-65533`);
  const host = env.TETHER_HOST || '127.0.0.1';
  const clusterDir = join(dataDir, 'cluster');
  if (env.NATS_URL) notes.push('NATS_URL is set: ignored, the cluster runs nats-servers of its own');
  let secretsKey = env.TETHER_SECRETS_KEY;
  if (!secretsKey) {
    const kept = keptSecretsKey(clusterDir);
    secretsKey = kept.key;
    notes.push(
      `TETHER_SECRETS_KEY is not set: ${kept.made ? 'generated one' : 'using the one'} kept in ${kept.file} ` +
        '(readable by you only; not shown), so that secrets of conversations made in one run open in the next.',
    );
  }
  return {
    notes,
    host,
    /** The host in URLs: a wildcard address is reached on loopback. */
    urlHost: ['0.0.0.0', '::'].includes(host) ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host,
    ports: Array.from({ length: SIZE }, (_, i) => base + i),
    clusterDir,
    workspacesDir: resolve(env.TETHER_WORKSPACES_DIR || join(clusterDir, 'workspaces')),
    secretsKey,
  };
}

/** The secrets key kept in the cluster's data dir, made (32 random bytes, mode 0600) the first time. */
function keptSecretsKey(clusterDir) {
  const file = join(clusterDir, 'secrets-key');
  const kept = existsSync(file) ? readFileSync(file, 'utf8').trim() : '';
  if (kept) return { key: kept, file, made: false };
  const key = randomBytes(32).toString('base64');
  mkdirSync(clusterDir, { recursive: true });
  writeFileSync(file, `${key}\n`, { mode: 0o600 });
  return { key, file, made: true };
}

/** Fails, naming the port, when one of the nodes' ports cannot be listened on. */
export async function checkPortsFree(host, ports) {
  for (const port of ports) {
    const problem = await new Promise((done) => {
      const probe = createServer();
      probe.once('error', (err) => done(err.code ?? err.message));
      probe.listen(port, host, () => probe.close(() => done(null)));
    });
    if (problem) {
      const why = problem === 'EADDRINUSE' ? 'is in use' : `cannot be listened on (${problem})`;
      throw new ClusterError(
        `port ${port} on ${host} ${why}: the cluster's nodes take TETHER_PORT (${ports[0]}) and the next two ports; ` +
          'set TETHER_PORT to a base with three free ports',
      );
    }
  }
}

/**
 * The nats-servers: names kept across runs, free loopback ports (client, route,
 * monitoring) taken anew each run, a store each, every one routed to all three.
 */
export async function planNats(settings) {
  const ports = await freePorts(3 * SIZE, settings.ports);
  const servers = Array.from({ length: SIZE }, (_, i) => ({
    name: `nats-${i + 1}`,
    port: ports[i],
    url: `nats://127.0.0.1:${ports[i]}`,
    routeUrl: `nats://127.0.0.1:${ports[SIZE + i]}`,
    monitorUrl: `http://127.0.0.1:${ports[2 * SIZE + i]}`,
    monitorPort: ports[2 * SIZE + i],
    storeDir: join(settings.clusterDir, `nats-${i + 1}`),
    logFile: join(settings.clusterDir, `nats-${i + 1}.log`),
  }));
  const routes = servers.map((s) => s.routeUrl).join(',');
  for (const s of servers) {
    s.args = ['-js', '-a', '127.0.0.1', '-p', String(s.port), '-m', String(s.monitorPort), '-sd', s.storeDir];
    s.args.push('--server_name', s.name, '--cluster_name', NATS_CLUSTER_NAME, '--cluster', s.routeUrl);
    s.args.push('--routes', routes);
  }
  return servers;
}

/** The Tether nodes: node-<n> on TETHER_PORT + n - 1, a data dir each, the rest shared. */
export function planNodes(settings, nats, env) {
  const natsUrl = nats.map((s) => s.url).join(',');
  return settings.ports.map((port, i) => {
    const name = `node-${i + 1}`;
    const url = `http://${settings.urlHost}:${port}`;
    return {
      name,
      logFile: join(settings.clusterDir, `${name}.log`),
      url,
      ws: `ws://${settings.urlHost}:${port}/ws`,
      env: {
        ...env,
        NATS_URL: natsUrl,
        TETHER_REPLICAS: String(SIZE),
        TETHER_NODE_ID: name,
        TETHER_HOST: settings.host,
        TETHER_PORT: String(port),
        TETHER_PUBLIC_URL: url,
        TETHER_DATA_DIR: join(settings.clusterDir, `tether-${i + 1}`),
        TETHER_WORKSPACES_DIR: settings.workspacesDir,
        TETHER_SECRETS_KEY: settings.secretsKey,
      },
    };
  });
}

/** Distinct ports the OS says are free now, none of `taken`. */
async function freePorts(count, taken) {
  const ports = new Set();
  while (ports.size < count) {
    const port = await new Promise((done, fail) => {
      const probe = createServer();
      probe.once('error', fail);
      probe.listen(0, '127.0.0.1', () => {
        const { port: p } = probe.address();
        probe.close(() => done(p));
      });
    });
    if (!taken.includes(port)) ports.add(port);
  }
  return [...ports];
}
