// docker-compose.yml and deploy/nginx.conf, read as Docker Compose and nginx read them
// (no Docker engine here): the cluster they describe is wired the way docs/cluster.md says.
import { readFileSync } from 'node:fs';
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

const natsServices = (c: Compose) => Object.keys(c.services).filter((n) => c.services[n]!.image?.startsWith('nats:'));
const tetherServices = (c: Compose) => Object.keys(c.services).filter((n) => c.services[n]!.build !== undefined);
const clientPort = (s: Service) => Number(flag(argsOf(s), '-p', '--port') ?? 4222);

function natsProblems(c: Compose): string[] {
  const problems: string[] = [];
  const names = natsServices(c);
  if (names.length !== 3) problems.push(`${names.length} NATS services, not 3`);
  const clusterNames = new Set<string | undefined>();
  const stores = new Set<string | undefined>();
  for (const name of names) {
    const s = c.services[name]!;
    const args = argsOf(s);
    if (!args.some((a) => ['-js', '--js', '--jetstream'].includes(a))) problems.push(`${name}: no JetStream (-js)`);
    clusterNames.add(flag(args, '--cluster_name'));
    if (!flag(args, '--cluster')) problems.push(`${name}: no --cluster (route) address`);
    const storeDir = flag(args, '-sd', '--store_dir');
    const store = storeDir && namedVolumeAt(c, s, storeDir);
    if (!store) problems.push(`${name}: its store (${storeDir}) is not on a named volume`);
    stores.add(store);
    const routes = (flag(args, '--routes') ?? '')
      .split(',')
      .filter(Boolean)
      .map((r) => new URL(r));
    const routed = new Set(routes.map((r) => r.hostname));
    const others = names.filter((n) => n !== name);
    if (!others.every((o) => routed.has(o)) || ![...routed].every((r) => names.includes(r)))
      problems.push(`${name} routes to ${[...routed].join(', ') || 'nothing'}, not ${others.join(' and ')}`);
    for (const route of routes) {
      const peer = c.services[route.hostname];
      const peerCluster = peer && flag(argsOf(peer), '--cluster');
      if (peerCluster && new URL(peerCluster).port !== route.port)
        problems.push(`${name}: route ${route.href} is not ${route.hostname}'s cluster port`);
    }
    const health = [s.healthcheck?.test ?? []].flat().join(' ');
    const monitor = flag(args, '-m', '--http_port');
    if (!health.includes(`:${monitor}/healthz?js-enabled-only=true`))
      problems.push(`${name}: its healthcheck does not ask /healthz?js-enabled-only=true on its monitoring port`);
  }
  if (clusterNames.size !== 1 || clusterNames.has(undefined)) problems.push('the NATS servers share no cluster name');
  if (stores.size !== names.length) problems.push('two NATS servers share a store');
  return problems;
}

function tetherProblems(c: Compose): string[] {
  const problems: string[] = [];
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
    if (!/^\$\{TETHER_SECRETS_KEY:\?[^}]+\}$/.test(env.TETHER_SECRETS_KEY ?? ''))
      problems.push(`${name}: TETHER_SECRETS_KEY is not required from the environment (\${TETHER_SECRETS_KEY:?...})`);
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
    expect(natsProblems(compose)).toEqual([]);
  });

  it('runs three Tether nodes with three replicas on all three NATS servers, one workspaces volume and their own data', () => {
    expect(tetherServices(compose)).toHaveLength(3);
    expect(tetherProblems(compose)).toEqual([]);
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
      (c) =>
        editArgs(c, 'nats-3', (args) => args.map((a) => (a.startsWith('--cluster_name') ? '--cluster_name=x' : a))),
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
  ];
  it.each(broken)('fails with %s', (_what, breakIt, problem) => {
    const copy = structuredClone(compose);
    breakIt(copy);
    expect([...natsProblems(copy), ...tetherProblems(copy)].join('\n')).toMatch(problem);
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

function setEnv(c: Compose, service: string, key: string, value: string): void {
  (c.services[service]!.environment as Record<string, string>)[key] = value;
}
