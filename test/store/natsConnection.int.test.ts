import { describe, expect, inject, onTestFinished, test } from 'vitest';
import { StoreUnavailableError } from '../../src/store/errors.ts';
import { connectNats } from '../../src/store/natsConnection.ts';
import { freePort } from '../support/serverProcess.ts';

/** A loopback URL nothing listens on. */
async function deadUrl(): Promise<string> {
  return `nats://127.0.0.1:${await freePort()}`;
}

describe('connectNats', () => {
  // nats.js reads one string as one URL: given this list whole, it would dial the last (dead) one only.
  test('connects through a comma-separated list to its one live server', async () => {
    const live = new URL(inject('natsUrl'));
    const list = ` ${await deadUrl()} , ,${live.href}, ${await deadUrl()}`;
    const nc = await connectNats(list, { name: 'connection-test' });
    onTestFinished(() => nc.close());
    await nc.flush();
    expect(nc.info?.port).toBe(Number(live.port));
  });

  test('names the URL list as given when no server in it answers', async () => {
    const url = `${await deadUrl()},${await deadUrl()}`;
    const failure = connectNats(url, { name: 'connection-test' });
    await expect(failure).rejects.toThrow(StoreUnavailableError);
    await expect(failure).rejects.toThrow(`cannot connect to NATS at ${url}:`);
  });

  test('refuses a list without any URL in it', async () => {
    await expect(connectNats(' , ', { name: 'connection-test' })).rejects.toThrow('no server URL in it');
  });
});
