// A child process for the runtime tests that kill or freeze their server: starts
// a LocalRuntime under <workspaceRoot> (with a heartbeat unless
// <heartbeatTimeoutMs> is 0; in a bwrap sandbox when the third argument is
// `bwrap`), runs `sleep 1000` in it, prints the shell's process group id as one
// line, then idles until it is stopped or killed.
import { localRuntimeProvider, type LocalRuntime } from '../../src/runtime/index.ts';

const [workspaceRoot, heartbeatTimeoutMs, sandbox] = process.argv.slice(2);
if (!workspaceRoot || !heartbeatTimeoutMs) {
  throw new Error('usage: localRuntimeChild.ts <workspaceRoot> <heartbeatTimeoutMs> [bwrap]');
}
const provider = localRuntimeProvider({
  workspaceRoot,
  heartbeatTimeoutMs: Number(heartbeatTimeoutMs) || undefined,
  sandbox: sandbox === 'bwrap' ? { network: true } : undefined,
});
const runtime = provider.create('conv-1') as LocalRuntime;
await runtime.start();
runtime.run('sleep 1000').catch(() => {}); // it never finishes: the test freezes or kills this process meanwhile
process.stdout.write(`${runtime.pgid}\n`);
setInterval(() => {}, 60_000);
