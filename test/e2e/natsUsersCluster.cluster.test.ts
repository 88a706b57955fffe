import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { natsBinary } from '../support/natsBinary.ts';
import { createConversation, eventsWhen, freePort, type ServerProcess } from '../support/serverProcess.ts';
import { SERVER_WAIT, until } from '../support/until.ts';

/*
 * The shipped cluster configuration (deploy/nats/cluster.conf, issue 27): three
 * nats-servers routed to each other as the `route` user, and a node with the
 * `tether` user on all three serving a conversation, its stream on three
 * replicas; a server that routes in without the route password is refused.
 */

const DEPLOY = resolve(import.meta.dirname, '../../deploy/nats');
const PASSWORDS = {
  TETHER_NATS_PASSWORD: 'node-pw-31ad',
  SUBSCRIBER_NATS_PASSWORD: 'reader-pw-9c07',
  NATS_ROUTE_PASSWORD: 'route-pw-5e2b',
};

interface Nats {
  readonly name: string;
  readonly url: string;
  readonly monitorUrl: string;
  readonly routePort: number;
  /** Its log so far (nats-server logs on stderr). */
  readonly log: string[];
}

interface Routez {
  num_routes: number;
  routes?: Array<{ remote_id: string }>;
}

const e2e = useE2e();
const routeUrl = (port: number, password = PASSWORDS.NATS_ROUTE_PASSWORD) =>
  `nats://route:${password}@127.0.0.1:${port}`;

/** A JetStream nats-server on loopback with `args`, the passwords in its environment; killed at clean-up. */
async function startNats(
  store: string,
  name: string,
  routePort: number,
  args: string[],
  env: Record<string, string>,
): Promise<Nats> {
  const [port, monitorPort] = [await freePort(), await freePort()];
  const own = ['-js', '-a', '127.0.0.1', '-p', String(port), '-m', String(monitorPort), '--server_name', name];
  const child = spawn(natsBinary(), [...own, '--store_dir', join(store, name), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise((done) => child.once('exit', done));
  e2e.onCleanup(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  const monitorUrl = `http://127.0.0.1:${monitorPort}`;
  const nats: Nats = { name, url: `nats://127.0.0.1:${port}`, monitorUrl, routePort, log: [] };
  createInterface({ input: child.stderr }).on('line', (line) => nats.log.push(line));
  return nats;
}

async function monitor<T>(nats: Nats, path: string): Promise<T> {
  const res = await fetch(`${nats.monitorUrl}${path}`, { signal: AbortSignal.timeout(2_000) });
  return (await res.json()) as T;
}

let store: string;
let cluster: Nats[];
let server: ServerProcess;

beforeAll(async () => {
  store = await e2e.tempDir();
  const names = ['n1', 'n2', 'n3'];
  const routePorts = new Map<string, number>();
  for (const name of names) routePorts.set(name, await freePort());
  cluster = await Promise.all(
    names.map((name) => {
      const routes = names.filter((n) => n !== name).map((n) => routeUrl(routePorts.get(n)!));
      const env = { ...PASSWORDS, NATS_CLUSTER_LISTEN: `127.0.0.1:${routePorts.get(name)}` };
      return startNats(
        store,
        name,
        routePorts.get(name)!,
        ['-c', join(DEPLOY, 'cluster.conf'), '--routes', routes.join(',')],
        env,
      );
    }),
  );
  const routed = async () =>
    (await Promise.all(cluster.map((n) => monitor<Routez>(n, '/routez')))).every((r) => r.num_routes === 2);
  await until(
    routed,
    () => `three servers routed to each other:\n${cluster.map((n) => n.log.join('\n')).join('\n')}`,
    SERVER_WAIT,
  );
  server = await e2e.start({
    env: {
      NATS_URL: cluster.map((n) => n.url).join(','),
      NATS_USER: 'tether',
      NATS_PASSWORD: PASSWORDS.TETHER_NATS_PASSWORD,
      TETHER_REPLICAS: '3',
    },
  });
}, 30_000);

describe('the shipped NATS cluster configuration', () => {
  it('serves a conversation end to end through a node with the tether user, its stream on the three servers', async () => {
    const id = await createConversation(server.baseUrl, { initial_message: 'hello' });
    const events = await eventsWhen(server, id, 'the answer', (e) =>
      e.some((l) => l.event.source === 'agent' && l.event.type === 'message'),
    );
    expect(events[0]!.event.type).toBe('conversation_created');

    const nc = await connect({
      servers: cluster.map((n) => n.url),
      user: 'tether',
      pass: PASSWORDS.TETHER_NATS_PASSWORD,
    });
    try {
      const info = await (await jetstreamManager(nc)).streams.info('TETHER_EVENTS');
      const placed = [info.cluster?.leader, ...(info.cluster?.replicas ?? []).map((r) => r.name)];
      expect(placed.sort()).toEqual(['n1', 'n2', 'n3']);
    } finally {
      await nc.close();
    }
  });

  it('refuses a server that routes in without the route password, or with another one', async () => {
    const routePort = await freePort();
    const [firstRoute, secondRoute] = cluster.map((n) => n.routePort);
    // tether.conf's users, its own route address, and routes with no user or a wrong password.
    const routes = [`nats://127.0.0.1:${firstRoute}`, routeUrl(secondRoute!, 'guessed')];
    const args = [
      '-c',
      join(DEPLOY, 'tether.conf'),
      '--cluster_name',
      'tether',
      '--cluster',
      `nats://127.0.0.1:${routePort}`,
    ];
    const intruder = await startNats(store, 'intruder', routePort, [...args, '--routes', routes.join(',')], PASSWORDS);
    // It tries both routes at once, and again every second.
    const refused = () => intruder.log.filter((line) => /authorization violation/i.test(line)).join('\n');
    await until(
      () => [firstRoute, secondRoute].every((port) => refused().includes(`:${port}`)),
      () => `both routes refused; the intruder's log:\n${intruder.log.join('\n')}`,
      { ...SERVER_WAIT, timeoutMs: 10_000 },
    );
    const { server_id: intruderId } = await monitor<{ server_id: string }>(intruder, '/varz');
    for (const nats of cluster) {
      const routez = await monitor<Routez>(nats, '/routez');
      expect(routez.num_routes).toBe(2);
      expect(routez.routes?.map((r) => r.remote_id)).not.toContain(intruderId);
    }
    expect((await monitor<Routez>(intruder, '/routez')).num_routes).toBe(0);
  });
});
