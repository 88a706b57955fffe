// A child process for test/runtime/localRuntimeHeartbeat.int.test.ts: starts a
// LocalRuntime with a heartbeat under <workspaceRoot>, runs `sleep 1000` in it,
// prints the shell's pid (its process group id) as one line, then idles until
// it is stopped or killed.
import { localRuntimeProvider, type LocalRuntime } from '../../src/runtime/index.ts';

const [workspaceRoot, heartbeatTimeoutMs] = process.argv.slice(2);
if (!workspaceRoot || !heartbeatTimeoutMs) {
  throw new Error('usage: localRuntimeChild.ts <workspaceRoot> <heartbeatTimeoutMs>');
}
const provider = localRuntimeProvider({ workspaceRoot, heartbeatTimeoutMs: Number(heartbeatTimeoutMs) });
const runtime = provider.create('conv-1') as LocalRuntime;
await runtime.start();
runtime.run('sleep 1000').catch(() => {}); // it never finishes: the test freezes this process meanwhile
process.stdout.write(`${runtime.pid}\n`);
setInterval(() => {}, 60_000);
