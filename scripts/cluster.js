#!/usr/bin/env node
// `npm run cluster`: a Tether cluster on this machine, to try it by hand. Three
// nats-servers (JetStream, one NATS cluster, on loopback, on free ports) and three
// `tether serve` nodes on TETHER_PORT, TETHER_PORT+1 and TETHER_PORT+2, each with a
// data dir of its own under TETHER_DATA_DIR/cluster, one workspaces folder and one
// secrets key. Ctrl-C (or SIGTERM) stops the nodes first, so they drain while NATS
// is still there, then the nats-servers, and exits 0. Plain JavaScript, like
// scripts/start.js, so that it runs without tsx.
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { buildIfStale } from './build.js';
import { ClusterError, SIZE, checkPortsFree, planNats, planNodes, readSettings } from './cluster-plan.js';
import { describeExit, guardedProcess } from './guarded-process.js';
import { ensureNatsServer } from './nats-binary.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const NATS_READY_MS = 30_000;
const NODE_READY_MS = 60_000;
/** A node drains on SIGTERM: running commands get a lease (5 s by default) within its own 10 s budget. */
const NODE_STOP_MS = 15_000;
const NATS_STOP_MS = 10_000;
const TAIL_LINES = 20;
/** Starts of the nats-servers when another program took one of their ports first. */
const PORT_ATTEMPTS = 3;

/** A signal came while the cluster started: stop what was started, and exit 0. */
class StartCancelled extends Error {
  name = 'StartCancelled';
}

const say = (line) => process.stdout.write(`cluster | ${line}\n`);
const warn = (line) => process.stderr.write(`cluster | ${line}\n`);
// A terminal closed under us (SIGHUP) must not stop the script before it has stopped its children.
process.stdout.on('error', () => {});
process.stderr.on('error', () => {});

/** The running children, nodes and nats-servers, in start order. */
const children = [];
/** 'starting' until every node answers, then 'running', then 'stopping'. */
let phase = 'starting';
/** Why the start must end early (a child died, a signal came); checked by every wait. */
let startAborted;

process.on('SIGINT', () => onSignal('SIGINT'));
process.on('SIGTERM', () => onSignal('SIGTERM'));
process.on('SIGHUP', () => onSignal('SIGHUP'));

try {
  const settings = readSettings(process.env);
  for (const note of settings.notes) say(note);
  const started = Date.now();
  const natsBin = await ensureNatsServer({ log: say });
  buildIfStale({ log: say });
  await checkPortsFree(settings.host, settings.ports);
  if (startAborted) throw startAborted;
  const nats = await startNats(settings, natsBin);
  const nodes = await startNodes(settings, nats);
  phase = 'running';
  printSummary(settings, nats, nodes, Date.now() - started);
} catch (err) {
  if (phase !== 'starting') throw err;
  phase = 'stopping';
  if (!(err instanceof StartCancelled)) warn(err instanceof Error ? err.message : String(err));
  await stopAll();
  process.exit(err instanceof StartCancelled ? 0 : 1);
}

/**
 * Three nats-servers routed to each other; resolves once each is current with a JetStream meta leader. A port
 * found free and taken by another program before a server bound it starts them all again on other ports.
 */
async function startNats(settings, natsBin) {
  for (let attempt = 1; ; attempt++) {
    const servers = await planNats(settings);
    for (const server of servers) {
      mkdirSync(server.storeDir, { recursive: true });
      // The later servers' route ports are not open yet: nats-server retries its routes by itself.
      startChild(server, 'nats', { command: natsBin, args: server.args, env: process.env }, () => {});
    }
    say(`nats-servers starting; their logs: ${join(settings.clusterDir, 'nats-<n>.log')}`);
    try {
      for (const server of servers) {
        // Its /healthz answers 200 once it is in touch with a JetStream meta leader, so streams can be made.
        await until(() => answers200(`${server.monitorUrl}/healthz`), `${server.name}'s JetStream`, {
          ms: NATS_READY_MS,
          tailOf: server.name,
        });
      }
      return servers;
    } catch (err) {
      const taken = err instanceof ClusterError && /address already in use/.test(err.message);
      if (!taken || attempt >= PORT_ATTEMPTS) throw err;
      say('a port was taken by another program meanwhile: the nats-servers start again on other ports');
      await stopGroup('nats', NATS_STOP_MS);
      children.splice(0, children.length, ...children.filter((c) => c.kind !== 'nats'));
      // A signal that came meanwhile still ends the start.
      if (startAborted === err) startAborted = undefined;
    }
  }
}

/**
 * Three `tether serve` nodes on the NATS cluster, one after another: the first makes the streams and buckets,
 * which on a fresh cluster is the slow part, and the others find them. Resolves once each answers /healthz 200
 * (it answers 503 until it is ready).
 */
async function startNodes(settings, nats) {
  mkdirSync(settings.workspacesDir, { recursive: true });
  const nodes = planNodes(settings, nats, process.env);
  say(`Tether nodes starting; their logs (shown below too): ${join(settings.clusterDir, 'node-<n>.log')}`);
  for (const node of nodes) {
    const spawnOptions = { command: process.execPath, args: ['bin/tether.js', 'serve'], env: node.env };
    const child = startChild(node, 'node', spawnOptions, (line) => process.stderr.write(`${node.name} | ${line}\n`));
    await until(() => answers200(`${node.url}/healthz`), `${node.name} to answer ${node.url}/healthz`, {
      ms: NODE_READY_MS,
    });
    node.pid = await child.process.pid;
  }
  return nodes;
}

/**
 * Starts a guarded child, its output appended to its log file, and watches for its end: during the start it ends
 * the start, later it is reported.
 */
function startChild({ name, logFile }, kind, spawnOptions, onLine) {
  const tail = [];
  const child = {
    name,
    kind,
    tail,
    expected: false,
    process: guardedProcess({
      ...spawnOptions,
      cwd: ROOT,
      logFile,
      onLine: (line) => {
        tail.push(line);
        if (tail.length > TAIL_LINES) tail.shift();
        onLine(line);
      },
    }),
  };
  children.push(child);
  void child.process.exited.then((exit) => {
    if (!child.expected) void onUnexpectedExit(child, exit);
  });
  return child;
}

async function onUnexpectedExit(child, exit) {
  if (phase === 'starting') {
    const logs = child.kind === 'nats' ? `; its last lines:\n${child.tail.join('\n')}` : ' (its output is above)';
    startAborted ??= new ClusterError(`${child.name} ${describeExit(exit)} while the cluster started${logs}`);
    return;
  }
  if (phase !== 'running') return;
  warn(`${child.name} ${describeExit(exit)}; the others keep running`);
  if (children.some((c) => c.kind === 'node' && c.process.running)) return;
  warn('no Tether node is left: stopping the nats-servers');
  phase = 'stopping';
  await stopAll();
  process.exit(1);
}

function onSignal(signal) {
  if (phase === 'stopping') {
    warn(`${signal} again: killing every process now`);
    for (const child of children) child.process.kill();
    return;
  }
  if (phase === 'starting') {
    // The start notices at its next check and stops what it started.
    startAborted ??= new StartCancelled(signal);
    say(`${signal}: stopping what was started`);
    return;
  }
  phase = 'stopping';
  say(`${signal}: stopping the nodes (they drain), then the nats-servers`);
  void stopAll().then(() => process.exit(0));
}

/** Stops the nodes (SIGTERM, SIGKILL after a bound), then the nats-servers. */
async function stopAll() {
  await stopGroup('node', NODE_STOP_MS);
  await stopGroup('nats', NATS_STOP_MS);
  say('stopped');
}

/** Stops the children of one kind: SIGTERM, SIGKILL after `graceMs`. */
async function stopGroup(kind, graceMs) {
  const group = children.filter((c) => c.kind === kind);
  for (const child of group) child.expected = true;
  const gentle = await Promise.all(group.map((c) => c.process.stop(graceMs)));
  group.forEach((c, i) => gentle[i] || warn(`${c.name} did not stop within ${graceMs / 1000} s: killed`));
}

/** Polls `check` until it holds; throws when the start was aborted or after `ms`. */
async function until(check, what, { ms, tailOf }) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (startAborted) throw startAborted;
    if (await check()) return;
    if (Date.now() > deadline) {
      const tail = children.find((c) => c.name === tailOf)?.tail;
      throw new ClusterError(
        `timed out after ${ms / 1000} s waiting for ${what}${tail ? `:\n${tail.join('\n')}` : ''}`,
      );
    }
    await sleep(100);
  }
}

async function answers200(url) {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.status === 200;
  } catch {
    return false;
  }
}

function printSummary(settings, nats, nodes, tookMs) {
  say(
    `ready in ${(tookMs / 1000).toFixed(1)} s: ${SIZE} Tether nodes on a ${SIZE}-server NATS cluster (TETHER_REPLICAS=${SIZE})`,
  );
  for (const node of nodes) say(`  ${node.name}  ${node.url}  ${node.ws}  (pid ${node.pid})`);
  say(`  NATS_URL=${nats.map((s) => s.url).join(',')}`);
  say(`  data: ${settings.clusterDir}  workspaces: ${settings.workspacesDir}`);
  say('Ctrl-C stops them all. kill -9 a node to watch the others take over its conversations.');
}
