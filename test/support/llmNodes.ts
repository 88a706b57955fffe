import type { E2e } from './e2e.ts';
import { startFakeLlmServer, type FakeLlmServer } from './fakeLlmServer.ts';
import type { ServerProcess } from './serverProcess.ts';

/**
 * Two `tether serve` processes on the run's nats-server (a 1 s lease) with the
 * LLM agent talking to one fake OpenAI-compatible server, closed with the file.
 */
export async function startLlmNodes(e2e: E2e): Promise<{ llm: FakeLlmServer; a: ServerProcess; b: ServerProcess }> {
  const llm = await startFakeLlmServer();
  e2e.onCleanup(() => llm.close());
  const nats = await e2e.nats();
  const env = {
    NATS_URL: nats.url,
    TETHER_LEASE_MS: '1000',
    TETHER_LLM_BASE_URL: llm.baseUrl,
    TETHER_LLM_API_KEY: 'sk-fake',
    TETHER_LLM_MODEL: 'fake-model',
  };
  const [a, b] = await Promise.all([e2e.start({ env }), e2e.start({ env })]);
  return { llm, a, b };
}
