import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoggedEvent } from '../../protocol/index.ts';
import { natsBinary } from '../support/natsBinary.ts';
import { operatorMode, type OperatorMode } from '../support/natsJwt.ts';
import { createConversation, eventsWhen, freePort, startServer, type ServerProcess } from '../support/serverProcess.ts';
import { runTether } from '../support/tetherCli.ts';
import { until } from '../support/until.ts';

/*
 * NATS_CREDS (a credentials file: a user JWT and its nkey seed) against a
 * nats-server in operator mode: a node serves a conversation with it,
 * `tether replay` reads the conversation back with it, and a user the server
 * does not know is refused at start with a message that names NATS_CREDS.
 */

const dir = mkdtempSync(join(tmpdir(), 'tether-nats-creds-'));
let nats: ChildProcess;
let natsLog = '';
let natsUrl: string;
let operator: OperatorMode;
let creds: string;
let seed: string;
let server: ServerProcess | undefined;

function listening(port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = connectTcp(port, '127.0.0.1', () => done(socket.end() !== undefined));
    socket.on('error', () => done(false));
  });
}

/** Writes a credentials file into the test's directory and returns its path. */
function credsFile(name: string, content: Uint8Array): string {
  const path = join(dir, `${name}.creds`);
  writeFileSync(path, content, { mode: 0o600 });
  return path;
}

beforeAll(async () => {
  operator = await operatorMode();
  const port = await freePort();
  const conf = join(dir, 'nats.conf');
  writeFileSync(conf, operator.config(port, join(dir, 'store')));
  nats = spawn(natsBinary(), ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  nats.stderr!.setEncoding('utf8');
  nats.stderr!.on('data', (chunk: string) => (natsLog += chunk));
  natsUrl = `nats://127.0.0.1:${port}`;
  await until(() => listening(port), 'the nats-server in operator mode').catch((err: Error) => {
    throw new Error(`${err.message}; nats-server said:\n${natsLog}`);
  });
  const content = await operator.userCreds('tether');
  seed = operator.seedOf(content);
  creds = credsFile('tether', content);
}, 30_000);

afterAll(async () => {
  await server?.stop();
  nats?.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('NATS_CREDS', () => {
  let id: string;
  let served: LoggedEvent[];

  it('lets a node serve a conversation on a nats-server in operator mode', async () => {
    server = await startServer({ env: { NATS_URL: natsUrl, NATS_CREDS: creds } });
    id = await createConversation(server.baseUrl, { initial_message: 'hello' });
    const events = await eventsWhen(server, id, 'the answer, then the agent waiting', (e) => {
      const answered = e.findIndex((l) => l.event.source === 'agent' && l.event.type === 'message');
      return (
        answered >= 0 &&
        e
          .slice(answered)
          .some((l) => l.event.type === 'agent_state_changed' && l.event.data.state === 'awaiting_user_input')
      );
    });
    expect(events[0]!.event.type).toBe('conversation_created');
    served = events;
    expect(server.stderr()).not.toContain(seed);
    await server.stop();
    server = undefined;
  });

  it('lets `tether replay` read the conversation back, with what the node wrote as it stopped', async () => {
    const run = await runTether(['replay', id], { NATS_URL: natsUrl, NATS_CREDS: creds });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const lines = run.stdout.split('\n');
    for (const { seq, event } of served) {
      const line = lines.some((l) => l.trimStart().startsWith(`${seq}  ${event.type} (${event.source})`));
      expect(line, `seq ${seq} ${event.type}`).toBe(true);
    }
    // Stopping the node passivated the conversation: one more event, written with the same credentials.
    const through = /^conversation (\S+): \d+ events folded, through seq (\d+) \(the last stored event\)$/m.exec(
      run.stdout,
    );
    expect(through?.[1]).toBe(id);
    expect(Number(through?.[2])).toBeGreaterThan(served.at(-1)!.seq);
    expect(lines).toContain('state    passivated');
    expect(lines).toContain('agent    awaiting_user_input');
  });

  it('refuses a user the server does not know, naming NATS_CREDS and NATS’s reason, never the seed', async () => {
    const stranger = await operator.strangerCreds('stranger');
    const strangerSeed = operator.seedOf(stranger);
    const file = credsFile('stranger', stranger);

    // The CLI and the node, side by side: both refused at start.
    const env = { NATS_URL: natsUrl, NATS_CREDS: file };
    const [run, refused] = await Promise.all([
      runTether(['replay', id], env),
      startServer({ env }).then(
        async (started) => {
          await started.stop();
          return 'started';
        },
        (err: Error) => err.message,
      ),
    ]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`cannot connect to NATS at ${natsUrl} (NATS refused NATS_CREDS)`);
    expect(run.stderr).toMatch(/authorization violation/i);
    expect(run.stderr).not.toContain(strangerSeed);

    expect(refused).toContain('(NATS refused NATS_CREDS)');
    expect(refused).toMatch(/authorization violation/i);
    expect(refused).not.toContain(strangerSeed);
  });
});
