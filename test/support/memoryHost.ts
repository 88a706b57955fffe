import { scriptedAgent } from '../../src/agent/index.ts';
import { memoryRuntimeProvider } from '../../src/runtime/memoryRuntime.ts';
import { NodeHost, type HostDeps } from '../../src/host/index.ts';
import { memoryStores } from '../../src/store/index.ts';

/** A NodeHost on the in-memory twins, in-memory runtimes and the scripted agent; `deps` replaces any of them. */
export function memoryHost(deps: Partial<HostDeps> = {}): NodeHost {
  return new NodeHost({
    ...memoryStores(),
    runtimes: memoryRuntimeProvider(),
    agentFor: () => scriptedAgent(),
    ...deps,
  });
}
