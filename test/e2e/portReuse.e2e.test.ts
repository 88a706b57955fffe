import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { locateNatsServer } from '../../src/store/index.ts';
import { useE2e } from '../support/e2e.ts';
import { createConversation, freePort, http } from '../support/serverProcess.ts';

const ROUNDS = 8;
const e2e = useE2e();

/**
 * A nats-server wrapper that first notes whether something already listens on
 * Tether's port (bash's /dev/tcp connects), then runs the real server. Were
 * the HTTP port bound after the embedded nats-server starts, that server could
 * take the port the last Tether just freed, and the probe would find it free.
 */
async function probingNatsServer(dir: string, port: number): Promise<{ binary: string; probes: string }> {
  const binary = join(dir, 'probing-nats-server');
  const probes = join(dir, 'probes.txt');
  await writeFile(
    binary,
    `#!/usr/bin/env bash
if (exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null; then echo held >> '${probes}'; else echo free >> '${probes}'; fi
exec '${locateNatsServer({ path: process.env.PATH })}' "$@"
`,
  );
  await chmod(binary, 0o755);
  return { binary, probes };
}

describe('restarting Tether on the port it just freed', () => {
  it(`holds its HTTP port before its nats-server starts, and comes back on the same port after kill -9, ${ROUNDS} times`, async () => {
    const dataDir = await e2e.tempDir();
    const port = await freePort();
    const { binary, probes } = await probingNatsServer(dataDir, port);
    const ids: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const server = await e2e.start({ dataDir, port, env: { NATS_SERVER_BIN: binary } });
      expect(server.port).toBe(port);
      // The store came back with it: every conversation of the earlier rounds is there.
      for (const id of ids) expect((await http(server.baseUrl, 'GET', `/api/conversations/${id}`)).status).toBe(200);
      ids.push(await createConversation(server.baseUrl));
      server.kill('SIGKILL');
      await server.exited;
    }
    const seen = (await readFile(probes, 'utf8')).trim().split('\n');
    expect(seen).toEqual(Array.from({ length: ROUNDS }, () => 'held'));
  });
});
