import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { buildIfStale } from '../../scripts/build.js';
import { startEmbeddedNats } from '../../src/store/embeddedNats.ts';
import { natsBinary } from './natsBinary.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** URL of the nats-server (with JetStream) shared by the whole run. */
    natsUrl: string;
  }
}

/** Starts one nats-server for the run on a temporary store; removes both afterwards. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // The end-to-end tests run the compiled server (bin/tether.js runs dist/), as `npm start` does.
  buildIfStale();
  const dataDir = await mkdtemp(join(tmpdir(), 'tether-test-nats-'));
  const nats = await startEmbeddedNats({ dataDir, binary: natsBinary() });
  project.provide('natsUrl', nats.url);
  return async () => {
    await nats.stop();
    await rm(dataDir, { recursive: true, force: true });
  };
}
