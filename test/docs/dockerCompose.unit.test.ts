// docker-compose.yml, deploy/nginx.conf and deploy/nats/, read as Docker Compose, nginx and
// nats-server read them (no Docker engine here): the cluster they describe is wired the way
// docs/cluster.md says.
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { findDirectives, nginxSeconds, parseNginxConf, type NginxDirective } from '../support/nginxConf.ts';

const ROOT = new URL('../../', import.meta.url);
const readRepoFile = (path: string) => readFileSync(new URL(path, ROOT), 'utf8');

interface Service {
  image?: string;
  build?: unknown;
  command?: string | string[];
  environment?: Record<string, unknown> | string[];
  volumes?: Array<string | { source?: string; target: string; read_only?: boolean }>;
  ports?: Array<string | number | { target: number; published?: string | number }>;
  depends_on?: string[] | Record<string, { condition?: string }>;
  healthcheck?: { test?: string | string[] };
}
interface Compose {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
}

/** docker-compose.yml as Compose reads it: YAML merge keys (`<<: *anchor`) resolved. */
function loadCompose(text = readRepoFile('docker-compose.yml')): Compose {
  return parse(text, { merge: true }) as Compose;
}

const argsOf = (s: Service) => (typeof s.command === 'string' ? s.command.split(/\s+/) : (s.command ?? []));

/** A flag's value on a command line: `--name=value`, `-name=value`, `--name value` or `-name value`. */
function flag(args: string[], ...names: string[]): string | undefined {
  for (const [i, arg] of args.entries()) {
    const eq = arg.indexOf('=');
    if (names.includes(eq < 0 ? arg : arg.slice(0, eq))) return eq < 0 ? args[i + 1] : arg.slice(eq + 1);
  }
  return undefined;
}

function envOf(s: Service): Record<string, string> {
  const env = s.environment ?? {};
  if (Array.isArray(env))
    return Object.fromEntries(env.map((kv) => [kv.split('=')[0]!, kv.split('=').slice(1).join('=')]));
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
}

function mountsOf(s: Service): Array<{ source: string; target: string; readOnly: boolean }> {
  return (s.volumes ?? []).map((v) => {
    if (typeof v !== 'string') return { source: v.source ?? '', target: v.target, readOnly: v.read_only === true };
    const [source = '', target = '', mode = ''] = v.split(':');
    return { source, target, readOnly: mode.split(',').includes('ro') };
  });
}

/** The named volume (declared under top-level `volumes:`) mounted at `target`, or undefined. */
function namedVolumeAt(compose: Compose, s: Service, target: string): string | undefined {
  const mount = mountsOf(s).find((m) => m.target === target);
  return mount && Object.hasOwn(compose.volumes ?? {}, mount.source) ? mount.source : undefined;
}

/** A nats-server config as the server reads it: `include`s inlined (relative to the including file), no comments. */
function natsConf(path: string, read: (path: string) => string): string {
  return read(path)
    .replace(/#.*$/gm, '')
    .replace(/^\s*include\s+["']?([^"'\s;]+)["']?;?\s*$/gm, (_, file: string) =>
      natsConf(posix.join(posix.dirname(path), file), read),
    );
}

/** The text inside the braces of the first `name { ... }` block, or undefined. */
function confBlock(text: string, name: string): string | undefined {
  const start = new RegExp(`(?:^|[\\s{])${name}\\s*[:=]?\\s*\\{`).exec(text);
  if (!start) return undefined;
  const from = start.index + start[0].length;
  let depth = 1;
  for (let i = from; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(from, i);
  }
  return undefined;
}

const confValue = (text: string, key: string) =>
  new RegExp(`(?:^|[\\s{,])${key}\\s*[:=]\\s*"?([^\\s,}"]+)`).exec(text)?.[1];

/** Every `user: name ... password: value` pair of a nats-server config (accounts and routes). */
const confUsers = (conf: string) =>
  new Map(
    [...conf.matchAll(/\buser\s*[:=]\s*"?(\w+)"?[\s,]+password\s*[:=]\s*"?([^\s,}"]+)/g)].map((m) => [m[1]!, m[2]!]),
  );

/** A value required from the environment by Compose: `${NAME:?message}`. */
const required = (name: string) => new RegExp(`^\\$\\{${name}:\\?[^}]+\\}$`);

/** The config a NATS service runs (`-c`), as a repository path through its read-only mount of deploy/nats/. */
function natsConfPath(s: Service): string | undefined {
  const config = flag(argsOf(s), '-c', '--config');
  const mount = mountsOf(s).find((m) => config?.startsWith(`${m.target}/`));
  if (!config || !mount?.readOnly || posix.normalize(mount.source) !== 'deploy/nats') return undefined;
  return posix.join('deploy/nats', config.slice(mount.target.length + 1));
}

const natsServices = (c: Compose) => Object.keys(c.services).filter((n) => c.services[n]!.image?.startsWith('nats:'));
const tetherServices = (c: Compose) => Object.keys(c.services).filter((n) => c.services[n]!.build !== undefined);
const clientPort = (s: Service) => Number(flag(argsOf(s), '-p', '--port') ?? 4222);

/** A NATS service as its nats-server starts: its arguments, environment and config (`''` without one of deploy/nats/). */
interface NatsServer {
  name: string;
  service: Service;
  args: string[];
  env: Record<string, string>;
  conf: string;
  /** The config's `cluster { ... }` and, in it, `authorization { ... }` (the routes' user). */
  cluster: string;
  routeAuth: string;
}

function natsServer(c: Compose, name: string, read: (path: string) => string): NatsServer {
  const service = c.services[name]!;
  const path = natsConfPath(service);
  const conf = path ? natsConf(path, read) : '';
  const cluster = confBlock(conf, 'cluster') ?? '';
  const routeAuth = confBlock(cluster, 'authorization') ?? '';
  return { name, service, args: argsOf(service), env: envOf(service), conf, cluster, routeAuth };
}

/** A config value, a `$VAR` read from the server's environment as nats-server reads it. */
const resolved = (server: NatsServer, text: string, key: string) =>
  confValue(text, key)?.replace(/^\$(\w+)$/, (_, v: string) => server.env[v] ?? '');

const routesOf = (server: NatsServer) =>
  (flag(server.args, '--routes') ?? '')
    .split(',')
    .filter(Boolean)
    .map((r) => new URL(r));

function natsProblems(c: Compose, read: (path: string) => string): string[] {
  const servers = natsServices(c).map((name) => natsServer(c, name, read));
  const problems = servers.length === 3 ? [] : [`${servers.length} NATS services, not 3`];
  for (const server of servers)
    problems.push(...natsServerProblems(c, server), ...routeProblems(server, servers), ...secretProblems(server));
  const clusterNames = new Set(servers.map((s) => flag(s.args, '--cluster_name') ?? confValue(s.cluster, 'name')));
  if (clusterNames.size !== 1 || clusterNames.has(undefined)) problems.push('the NATS servers share no cluster name');
  const stores = new Set(servers.map((s) => namedVolumeAt(c, s.service, flag(s.args, '-sd', '--store_dir') ?? '')));
  if (stores.size !== servers.length) problems.push('two NATS servers share a store');
  return problems;
}

function natsServerProblems(c: Compose, server: NatsServer): string[] {
  const { name, service: s, args } = server;
  const problems: string[] = [];
  if (!args.some((a) => ['-js', '--js', '--jetstream'].includes(a))) problems.push(`${name}: no JetStream (-js)`);
  if (!server.conf) problems.push(`${name}: does not run a config of deploy/nats/ mounted read-only (-c)`);
  const storeDir = flag(args, '-sd', '--store_dir');
  if (!(storeDir && namedVolumeAt(c, s, storeDir)))
    problems.push(`${name}: its store (${storeDir}) is not on a named volume`);
  if ((s.ports ?? []).length > 0) problems.push(`${name}: publishes ${JSON.stringify(s.ports)} on the host`);
  const health = [s.healthcheck?.test ?? []].flat().join(' ');
  const monitor = flag(args, '-m', '--http_port');
  if (!health.includes(`:${monitor}/healthz?js-enabled-only=true`))
    problems.push(`${name}: its healthcheck does not ask /healthz?js-enabled-only=true on its monitoring port`);
  return problems;
}

/** Routed to the other servers' cluster ports, each route with the routes' user and password. */
function routeProblems(server: NatsServer, servers: NatsServer[]): string[] {
  const { name, args } = server;
  const problems: string[] = [];
  // nats-server drops the config's route authorization for a --cluster URL without a user.
  if (flag(args, '--cluster', '--cluster_listen')) problems.push(`${name}: --cluster overrides the config's routes`);
  if (!resolved(server, server.cluster, 'listen')) problems.push(`${name}: no cluster (route) address in its config`);
  const routes = routesOf(server);
  const routed = new Set(routes.map((r) => r.hostname));
  const others = servers.map((s) => s.name).filter((n) => n !== name);
  if (!others.every((o) => routed.has(o)) || ![...routed].every((r) => r === name || others.includes(r)))
    problems.push(`${name} routes to ${[...routed].join(', ') || 'nothing'}, not ${others.join(' and ')}`);
  const user = confValue(server.routeAuth, 'user');
  const password = `\${${confValue(server.routeAuth, 'password')?.replace(/^\$/, '') ?? ''}}`;
  for (const route of routes) {
    if (route.username !== user || decodeURIComponent(route.password) !== password)
      problems.push(`${name}: its route to ${route.hostname} does not carry the user ${user} and ${password}`);
    const peer = servers.find((s) => s.name === route.hostname);
    if (peer && resolved(peer, peer.cluster, 'listen')?.split(':').at(-1) !== route.port)
      problems.push(`${name}: its route to ${route.hostname} is not ${route.hostname}'s cluster port`);
  }
  return problems;
}

/** Routes have a user, and every password of the config is `$VAR`, required by Compose (`${VAR:?...}`). */
function secretProblems(server: NatsServer): string[] {
  const problems: string[] = [];
  if (!confValue(server.routeAuth, 'user')) problems.push(`${server.name}: routes are not authenticated`);
  for (const [user, password] of confUsers(server.conf)) {
    const variable = /^\$(\w+)$/.exec(password)?.[1];
    if (!variable) problems.push(`${server.name}: user ${user}'s password is written in the config`);
    else if (!required(variable).test(server.env[variable] ?? ''))
      problems.push(`${server.name}: ${variable} (${user}'s password) is not required from the environment`);
  }
  return problems;
}

function tetherProblems(c: Compose, read: (path: string) => string): string[] {
  const problems: string[] = [];
  const [first = ''] = natsServices(c);
  const users = confUsers(natsServer(c, first, read).conf);
  const names = tetherServices(c);
  const nats = natsServices(c);
  if (names.length !== 3) problems.push(`${names.length} Tether services, not 3`);
  const seen = { node: new Set<string>(), url: new Set<string>(), data: new Set<string>(), work: new Set<string>() };
  for (const name of names) {
    const s = c.services[name]!;
    const env = envOf(s);
    if (env.TETHER_REPLICAS !== '3') problems.push(`${name}: TETHER_REPLICAS is ${env.TETHER_REPLICAS}, not 3`);
    if (env.TETHER_HOST !== '0.0.0.0') problems.push(`${name}: TETHER_HOST is not 0.0.0.0`);
    const urls = (env.NATS_URL ?? '')
      .split(',')
      .filter(Boolean)
      .map((u) => new URL(u));
    const named = urls.map((u) => u.hostname).sort();
    if (named.join() !== [...nats].sort().join()) problems.push(`${name}: NATS_URL names ${named.join(', ')}`);
    for (const u of urls)
      if (c.services[u.hostname] && Number(u.port || 4222) !== clientPort(c.services[u.hostname]!))
        problems.push(`${name}: NATS_URL ${u.href} is not ${u.hostname}'s client port`);
    if (!required('TETHER_SECRETS_KEY').test(env.TETHER_SECRETS_KEY ?? ''))
      problems.push(`${name}: TETHER_SECRETS_KEY is not required from the environment (\${TETHER_SECRETS_KEY:?...})`);
    const password = users.get(env.NATS_USER ?? '')?.replace(/^\$/, '');
    if (!password) problems.push(`${name}: NATS_USER (${env.NATS_USER}) is not a user of the NATS config`);
    else if (!required(password).test(env.NATS_PASSWORD ?? ''))
      problems.push(`${name}: NATS_PASSWORD is not \${${password}:?...} from the environment`);
    seen.node.add(env.TETHER_NODE_ID ?? '');
    seen.url.add(env.TETHER_PUBLIC_URL ?? '');
    const workspaces = namedVolumeAt(c, s, env.TETHER_WORKSPACES_DIR ?? '');
    if (!workspaces) problems.push(`${name}: no named volume at TETHER_WORKSPACES_DIR (${env.TETHER_WORKSPACES_DIR})`);
    seen.work.add(workspaces ?? '');
    seen.data.add(namedVolumeAt(c, s, env.TETHER_DATA_DIR ?? '') ?? '');
    const deps = s.depends_on ?? [];
    const healthy = (n: string) => !Array.isArray(deps) && deps[n]?.condition === 'service_healthy';
    if (!nats.every(healthy)) problems.push(`${name}: does not wait for every NATS server to be healthy`);
  }
  if (seen.work.size !== 1) problems.push(`the nodes mount different workspaces: ${[...seen.work].join(', ')}`);
  for (const [what, values] of [
    ['TETHER_NODE_ID', seen.node],
    ['TETHER_PUBLIC_URL', seen.url],
    ['data volume', seen.data],
  ] as const)
    if (values.size !== names.length || values.has('')) problems.push(`each node needs a ${what} of its own`);
  return problems;
}

/** The load balancer: its service, and the nginx config it mounts (read with `readConf`). */
function balancerProblems(c: Compose, readConf: (path: string) => string): string[] {
  const problems: string[] = [];
  const [lb, ...more] = Object.values(c.services).filter((s) => s.image?.startsWith('nginx'));
  if (!lb || more.length > 0) return [`${more.length + (lb ? 1 : 0)} nginx services, not 1`];
  const mount = mountsOf(lb).find((m) => m.source.endsWith('.conf'));
  if (!mount?.readOnly || !mount.target.startsWith('/etc/nginx/conf.d/'))
    return ['the nginx config is not mounted read-only in /etc/nginx/conf.d/'];
  const conf = parseNginxConf(readConf(mount.source));
  const listen = findDirectives(conf, 'listen').map((d) => d.args[0]);
  const published = (lb.ports ?? []).map((p) =>
    typeof p === 'object' ? [String(p.published), String(p.target)] : String(p).split(':'),
  );
  if (!published.some((p) => p.length >= 2 && p.at(-2) === '3000' && listen.includes(p.at(-1))))
    problems.push(`host port 3000 does not reach nginx's listen (${listen.join(', ')})`);
  const location = findDirectives(conf, 'location').find((d) => d.args.join(' ') === '/')?.block ?? [];
  const one = (name: string) => findDirectives(location, name).map((d) => d.args.join(' '));
  const pass = one('proxy_pass')[0] ?? '';
  const upstream = findDirectives(conf, 'upstream').find((d) => `http://${d.args[0]}` === pass);
  const servers = findDirectives(upstream?.block ?? [], 'server').map((d) => d.args[0] ?? '');
  const expected = tetherServices(c).map((n) => `${n}:${envOf(c.services[n]!).TETHER_PORT ?? 3000}`);
  if (servers.sort().join() !== expected.sort().join())
    problems.push(`location / passes to ${pass} with servers ${servers.join(', ')}, not ${expected.join(', ')}`);
  if (!one('proxy_http_version').includes('1.1')) problems.push('no proxy_http_version 1.1');
  for (const header of ['Upgrade $http_upgrade', 'Connection $connection_upgrade'])
    if (!one('proxy_set_header').includes(header)) problems.push(`no proxy_set_header ${header}`);
  const map = findDirectives(conf, 'map').find((d) => d.args.join(' ') === '$http_upgrade $connection_upgrade');
  const maps = (key: string, value: string) =>
    (map?.block ?? []).some((d: NginxDirective) => d.name === key && d.args.join(' ') === value);
  if (!maps('default', 'upgrade') || !maps('', 'close'))
    problems.push('no map $http_upgrade $connection_upgrade { default upgrade; "" close; }');
  const metrics = findDirectives(conf, 'location').find((d) => d.args.join(' ') === '= /metrics')?.block ?? [];
  if (!metrics.some((d) => d.name === 'return' || (d.name === 'deny' && d.args[0] === 'all')))
    problems.push('/metrics (no token) is passed to a node');
  const readTimeout = nginxSeconds(one('proxy_read_timeout')[0] ?? '60s');
  if (!(readTimeout >= 600)) problems.push(`proxy_read_timeout is ${readTimeout} s: a quiet WebSocket is cut`);
  return problems;
}

describe('docker-compose.yml', () => {
  const compose = loadCompose();
  const readConf = (path: string) => readRepoFile(path.replace(/^\.\//, ''));

  it('runs three NATS servers with JetStream, each on its own volume, in one cluster, each routed to the other two', () => {
    expect(natsServices(compose)).toHaveLength(3);
    expect(natsProblems(compose, readConf)).toEqual([]);
  });

  it('runs them with deploy/nats/cluster.conf: users and routes with passwords from the environment, no NATS port on the host', () => {
    const servers = natsServices(compose).map((name) => natsServer(compose, name, readConf));
    expect(servers.map((s) => natsConfPath(s.service))).toEqual(Array(3).fill('deploy/nats/cluster.conf'));
    expect(servers.map((s) => confValue(s.routeAuth, 'user'))).toEqual(['route', 'route', 'route']);
    expect(servers.flatMap((s) => routesOf(s).map((r) => r.username))).toEqual(Array(6).fill('route'));
    expect(servers.flatMap((s) => s.service.ports ?? [])).toEqual([]);
    expect(tetherServices(compose).map((n) => envOf(compose.services[n]!).NATS_USER)).toEqual(Array(3).fill('tether'));
  });

  it('runs three Tether nodes with three replicas on all three NATS servers, one workspaces volume and their own data', () => {
    expect(tetherServices(compose)).toHaveLength(3);
    expect(tetherProblems(compose, readConf)).toEqual([]);
  });

  it('puts nginx in front on port 3000, round robin over the three nodes, passing WebSocket upgrades', () => {
    expect(balancerProblems(compose, readConf)).toEqual([]);
  });

  // The checks above catch what they are meant to: each broken copy fails the one it breaks.
  const broken: Array<[string, (c: Compose) => void, RegExp]> = [
    [
      'a server routed to one other',
      (c) =>
        editArgs(c, 'nats-2', (args) =>
          args.map((a) => (a.startsWith('--routes') ? '--routes=nats://nats-1:6222' : a)),
        ),
      /nats-2 routes to nats-1, not nats-1 and nats-3/,
    ],
    [
      'a server in a cluster of its own',
      (c) => editArgs(c, 'nats-3', (args) => [...args, '--cluster_name=x']),
      /share no cluster name/,
    ],
    [
      'a server without JetStream',
      (c) => editArgs(c, 'nats-1', (args) => args.filter((a) => a !== '-js')),
      /nats-1: no JetStream/,
    ],
    ['a node on one replica', (c) => setEnv(c, 'tether-2', 'TETHER_REPLICAS', '1'), /tether-2: TETHER_REPLICAS is 1/],
    [
      'a node on two NATS servers',
      (c) => setEnv(c, 'tether-1', 'NATS_URL', 'nats://nats-1:4222,nats://nats-2:4222'),
      /tether-1: NATS_URL names nats-1, nats-2$/m,
    ],
    [
      'a node with workspaces of its own',
      (c) => void (c.services['tether-3']!.volumes = ['tether-3-data:/data', 'tether-3-data:/workspaces']),
      /different workspaces/,
    ],
    [
      'a secrets key written in the file',
      (c) => setEnv(c, 'tether-1', 'TETHER_SECRETS_KEY', 'a'.repeat(64)),
      /tether-1: TETHER_SECRETS_KEY/,
    ],
    [
      'routes without the route password',
      (c) =>
        editArgs(c, 'nats-1', (args) =>
          args.map((a) => (a.startsWith('--routes') ? '--routes=nats://nats-2:6222,nats://nats-3:6222' : a)),
        ),
      /nats-1: its route to nats-2 does not carry the user route/,
    ],
    [
      'a route password written in the file',
      (c) => editArgs(c, 'nats-3', (args) => args.map((a) => a.replace(/route:[^@]*@nats-1/, 'route:hunter2@nats-1'))),
      /nats-3: its route to nats-1 does not carry/,
    ],
    [
      'a --cluster flag',
      (c) => editArgs(c, 'nats-2', (args) => [...args, '--cluster=nats://0.0.0.0:6222']),
      /nats-2: --cluster overrides/,
    ],
    [
      'a server without the shipped config',
      (c) => editArgs(c, 'nats-3', (args) => args.filter((a) => !a.startsWith('-c='))),
      /nats-3: does not run a config of deploy\/nats\//,
    ],
    [
      'the config mounted writable',
      (c) =>
        void (c.services['nats-1']!.volumes = mountsOf(c.services['nats-1']!).map((m) => `${m.source}:${m.target}`)),
      /nats-1: does not run a config of deploy\/nats\//,
    ],
    [
      'NATS published on the host',
      (c) => void (c.services['nats-1']!.ports = ['127.0.0.1:4222:4222']),
      /nats-1: publishes \["127.0.0.1:4222:4222"\] on the host/,
    ],
    [
      'a NATS password written in the file',
      (c) => setEnv(c, 'nats-2', 'NATS_ROUTE_PASSWORD', 'hunter2'),
      /nats-2: NATS_ROUTE_PASSWORD \(route's password\) is not required/,
    ],
    [
      'a node with its NATS password written in the file',
      (c) => setEnv(c, 'tether-1', 'NATS_PASSWORD', 'hunter2'),
      /tether-1: NATS_PASSWORD is not \$\{TETHER_NATS_PASSWORD:\?\.\.\.\}/,
    ],
    [
      'a node as a user the config does not have',
      (c) => setEnv(c, 'tether-3', 'NATS_USER', 'admin'),
      /tether-3: NATS_USER \(admin\) is not a user/,
    ],
  ];
  it.each(broken)('fails with %s', (_what, breakIt, problem) => {
    const copy = structuredClone(compose);
    breakIt(copy);
    expect([...natsProblems(copy, readConf), ...tetherProblems(copy, readConf)].join('\n')).toMatch(problem);
  });

  const brokenNatsConf: Array<[string, string, (conf: string) => string, RegExp]> = [
    [
      'routes without a user',
      'deploy/nats/cluster.conf',
      (conf) => conf.replace(/authorization \{[^}]*\}/, ''),
      /nats-1: routes are not authenticated/,
    ],
    [
      'no route address',
      'deploy/nats/cluster.conf',
      (conf) => conf.replace(/^\s*listen:.*$/m, ''),
      /nats-2: no cluster \(route\) address/,
    ],
    [
      'a password written in the config',
      'deploy/nats/tether.conf',
      (conf) => conf.replace('$SUBSCRIBER_NATS_PASSWORD', 'hunter2'),
      /nats-3: user subscriber's password is written in the config/,
    ],
  ];
  it.each(brokenNatsConf)('fails the NATS servers with %s', (_what, file, breakIt, problem) => {
    const text = breakIt(readRepoFile(file));
    expect(text).not.toBe(readRepoFile(file));
    const read = (path: string) => (path === file ? text : readConf(path));
    expect(natsProblems(compose, read).join('\n')).toMatch(problem);
  });

  const brokenConf: Array<[string, (conf: string) => string, RegExp]> = [
    ['no Upgrade header', (conf) => conf.replace(/proxy_set_header Upgrade .*;/, ''), /no proxy_set_header Upgrade/],
    [
      'a node left out',
      (conf) => conf.replace(/server tether-3:3000.*;/, ''),
      /not tether-1:3000, tether-2:3000, tether-3:3000/,
    ],
    ['the default read timeout', (conf) => conf.replace(/proxy_read_timeout .*;/, ''), /proxy_read_timeout is 60 s/],
    [
      '/metrics passed through',
      (conf) => conf.replace(/location = \/metrics \{[^}]*\}/, ''),
      /\/metrics \(no token\) is passed/,
    ],
  ];
  it.each(brokenConf)('fails the load balancer with %s', (_what, breakIt, problem) => {
    const text = breakIt(readRepoFile('deploy/nginx.conf'));
    expect(text).not.toBe(readRepoFile('deploy/nginx.conf'));
    expect(balancerProblems(compose, () => text).join('\n')).toMatch(problem);
  });
});

function editArgs(c: Compose, service: string, edit: (args: string[]) => string[]): void {
  c.services[service]!.command = edit(argsOf(c.services[service]!));
}

/** Sets one variable of one service (services that share an anchor's environment get their own copy). */
function setEnv(c: Compose, service: string, key: string, value: string): void {
  c.services[service]!.environment = { ...envOf(c.services[service]!), [key]: value };
}
