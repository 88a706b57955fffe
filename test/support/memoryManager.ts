import { scriptedAgent } from '../../src/agent/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { SessionManager, type SessionManagerDeps } from '../../src/host/index.ts';
import { memoryStores } from '../../src/store/index.ts';

/** A SessionManager on the in-memory twins, in-memory runtimes and the scripted agent; `deps` replaces any of them. */
export function memoryManager(deps: Partial<SessionManagerDeps> = {}): SessionManager {
  return new SessionManager({
    ...memoryStores(),
    runtimes: memoryRuntimeProvider(),
    agentFor: () => scriptedAgent(),
    ...deps,
  });
}
