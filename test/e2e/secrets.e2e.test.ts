import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { allEvents, http, type ServerProcess } from '../support/serverProcess.ts';
import { WsClient, wsUrlFor } from '../support/wsClient.ts';

const SECRET = 'tok-Zq81-very-secret-value';

const e2e = useE2e();
let server: ServerProcess;
let dataDir: string;

beforeAll(async () => {
  // Our own data dir: the store must still be there to read after the server stopped.
  dataDir = await e2e.tempDir();
  server = await e2e.start({ dataDir });
}, 60_000);

/** Every file under a folder, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

describe('secrets', () => {
  it('reach the runtime environment but no stored event, frame, REST answer, log line or byte of the JetStream store', async () => {
    const created = await http<{ conversation_id: string }>(server.baseUrl, 'POST', '/api/conversations', {
      secrets: { MY_TOKEN: SECRET },
    });
    expect(created.status).toBe(201);
    const id = created.body.conversation_id;
    const client = await WsClient.connect(wsUrlFor(server.wsUrl, id));
    client.sendMessage('!echo "token=$MY_TOKEN"');
    const output = await client.waitFor((f) => f.type === 'event' && f.event.type === 'command_output', {
      what: 'the output',
    });
    // The command saw the value: the output was masked, not empty.
    expect(output.type === 'event' && output.event.data).toMatchObject({
      exit_code: 0,
      output: 'token=<secret_hidden>\n',
    });
    client.sendMessage(`please remember ${SECRET}`);
    await client.waitFor(
      (f) =>
        f.type === 'event' &&
        f.event.type === 'message' &&
        f.event.source === 'agent' &&
        f.event.data.content.includes('remember'),
      {
        what: 'the answer that echoes the message',
      },
    );
    await client.roundTrip();

    const rest = JSON.stringify(await allEvents(server.baseUrl, id));
    expect(rest).toContain('<secret_hidden>');
    expect(rest).not.toContain(SECRET);
    expect(JSON.stringify(client.frames)).not.toContain(SECRET);
    expect(JSON.stringify((await http(server.baseUrl, 'GET', `/api/conversations/${id}`)).body)).not.toContain(SECRET);
    await client.close();

    // Stop the server so nats-server has written everything, then read the raw store bytes.
    await server.stop();
    const store = join(dataDir, 'nats');
    const files = filesUnder(store);
    expect(files.length).toBeGreaterThan(0);
    const needle = Buffer.from(SECRET);
    const holders = files.filter((f) => readFileSync(f).includes(needle));
    expect(holders).toEqual([]);
    // The masked event is in the store, so the scan did read the events.
    expect(files.some((f) => readFileSync(f).includes(Buffer.from('token=<secret_hidden>')))).toBe(true);
    expect(server.stderr()).not.toContain(SECRET);
  }, 60_000);
});
