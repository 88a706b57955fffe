// `npx tsx scripts/message-path.ts [--root DIR]`: which of Tether's own functions one user message
// runs, from its WebSocket frame to its event frames at the client and the agent's step asked, counted with V8's precise
// coverage in this process (a Tether built by createTether on a nats-server of its own, the
// scripted agent, in-memory runtimes). --root points at another checkout (its node_modules
// installed) to count an older commit the same way; only APIs both have are used.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as WsModule from 'ws';
import type * as AgentModule from '../src/agent/index.ts';
import type * as RuntimeModule from '../src/runtime/memoryRuntime.ts';
import type * as StoreModule from '../src/store/index.ts';
import type * as TetherModule from '../src/tether.ts';

const rootArg = process.argv.indexOf('--root');
const root = resolve(rootArg > 0 ? process.argv[rootArg + 1]! : '.');
// Typed by this checkout's modules: what is used here is the same in an older one.
const load = <T>(path: string) => import(pathToFileURL(join(root, path)).href) as Promise<T>;
const OWN = /\/(src|machines|protocol)\//;

function freePort(): Promise<number> {
  return new Promise((done) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => done(port));
    });
  });
}

async function main(): Promise<void> {
  const { createTether } = await load<typeof TetherModule>('src/tether.ts');
  const { connectNats, jetStreamStores } = await load<typeof StoreModule>('src/store/index.ts');
  const { scriptedAgent } = await load<typeof AgentModule>('src/agent/index.ts');
  const { memoryRuntimeProvider } = await load<typeof RuntimeModule>('src/runtime/memoryRuntime.ts');
  const { default: WebSocket } = await load<typeof WsModule>('node_modules/ws/wrapper.mjs');
  const store = await mkdtemp(join(tmpdir(), 'tether-path-'));
  const natsPort = await freePort();
  const nats = spawn('nats-server', ['-js', '-sd', store, '-a', '127.0.0.1', '-p', String(natsPort)], {
    stdio: 'ignore',
  });
  await new Promise((r) => setTimeout(r, 500));
  const nc = await connectNats(`nats://127.0.0.1:${natsPort}`, { name: 'tether message path' });
  // The scripted agent, until the measured message: its step is then held, so that nothing runs after the
  // path but the path (a step that answered would race the frames and make the count vary).
  let hold = false;
  let asked = () => {};
  const scripted = scriptedAgent();
  const agent: AgentModule.Agent = {
    context: () => {
      const context = scripted.context();
      return {
        observe: (event) => context.observe(event),
        step: (options) => {
          if (!hold) return context.step(options);
          asked();
          return new Promise<never>(() => {});
        },
      };
    },
  };
  const tether = createTether({ stores: await jetStreamStores(nc), runtimes: memoryRuntimeProvider(), agent });
  const { port } = await tether.listen(0, '127.0.0.1');
  const base = `http://127.0.0.1:${port}`;
  const created = await fetch(`${base}/api/conversations`, { method: 'POST', body: '{}' });
  const { conversation_id: id } = (await created.json()) as { conversation_id: string };
  const ws = new WebSocket(`ws://127.0.0.1:${port}/ws?conversation_id=${id}`);
  const frames: Array<{
    type: string;
    event?: { type: string; source: string; data: { content?: string; state?: string } };
  }> = [];
  let wake = () => {};
  ws.on('message', (data: Buffer) => {
    frames.push(JSON.parse(data.toString('utf8')) as (typeof frames)[number]);
    wake();
  });
  const until = async (check: () => boolean) => {
    while (!check()) await new Promise<void>((r) => ((wake = r), setTimeout(r, 20)));
  };
  const echoed = (content: string) => () =>
    frames.some((f) => f.type === 'event' && f.event?.source === 'user' && f.event.data.content === content);
  const answered = (content: string) => () =>
    frames.some((f) => f.type === 'event' && f.event?.source === 'agent' && f.event.data.content?.includes(content));
  const send = (content: string) =>
    ws.send(JSON.stringify({ type: 'user_action', action: { type: 'message', content } }));
  await until(() => frames.some((f) => f.type === 'sync'));
  // Warm: every function the path needs has run, the consumer and the follow exist.
  for (let i = 0; i < 5; i++) {
    send(`warm ${i}`);
    await until(answered(`warm ${i}`));
  }
  await new Promise((r) => setTimeout(r, 200));
  const inspector = new Session();
  inspector.connect();
  await inspector.post('Profiler.enable');
  await inspector.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
  await inspector.post('Profiler.takePreciseCoverage');
  hold = true;
  const agentAsked = new Promise<void>((resolve) => (asked = resolve));
  send('measured');
  const running = () =>
    frames.some(
      (f) => f.type === 'event' && f.event?.type === 'agent_state_changed' && f.event.data.state === 'running',
    );
  frames.length = 0;
  await until(() => echoed('measured')() && running());
  await agentAsked;
  const { result } = await inspector.post('Profiler.takePreciseCoverage');
  await inspector.post('Profiler.stopPreciseCoverage');
  const files = new Map<string, number>();
  const names = new Map<string, Set<string>>();
  let calls = 0;
  for (const script of result) {
    if (!OWN.test(script.url) || script.url.includes('node_modules')) continue;
    for (const fn of script.functions) {
      // With callCount and no detail, a function's first range holds its call count since the last take.
      const count = fn.ranges[0]?.count ?? 0;
      // The module's own top level (offset 0) is not a call on the path.
      if (count === 0 || fn.ranges[0]?.startOffset === 0) continue;
      calls += count;
      const file = script.url.slice(script.url.search(OWN) + 1);
      files.set(file, (files.get(file) ?? 0) + count);
      names.set(file, (names.get(file) ?? new Set()).add(fn.functionName || '(anonymous)'));
    }
  }
  process.stdout.write(
    `${root}: one user message, from its frame to its two event frames at the client (the message, running) and the agent asked: ${files.size} files, ${[...names.values()].reduce((n, set) => n + set.size, 0)} functions, ${calls} calls\n`,
  );
  for (const [file, count] of [...files].sort((a, b) => a[0].localeCompare(b[0])))
    process.stdout.write(`  ${file} ${count}: ${[...(names.get(file) ?? [])].join(', ')}\n`);
  ws.close();
  await tether.close();
  await nc.close();
  nats.kill();
  await rm(store, { recursive: true, force: true });
}

await main();
