import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('the cluster settings', () => {
  it('default to one generated node id, a 5 s lease and the workspaces under the data dir', () => {
    const config = loadConfig({ TETHER_DATA_DIR: '/tmp/t1' });
    expect(config).toMatchObject({ nodeId: undefined, leaseMs: 5_000, workspacesDir: join('/tmp/t1', 'workspaces') });
    expect(config).toMatchObject({ replicas: 1, publicUrl: undefined, natsStartTimeoutMs: 30_000 });
    expect(config.secretsKey).toBeUndefined();
  });

  it('are read from the environment', () => {
    const key = Buffer.alloc(32, 7);
    const config = loadConfig({
      TETHER_NODE_ID: 'node-a.1',
      TETHER_LEASE_MS: '1000',
      TETHER_WORKSPACES_DIR: 'shared/ws',
      TETHER_SECRETS_KEY: key.toString('base64'),
      TETHER_REPLICAS: '3',
      NATS_URL: 'nats://a:4222,nats://b:4222,nats://c:4222',
      TETHER_PUBLIC_URL: 'https://tether-1.example.com/',
    });
    expect(config).toMatchObject({ replicas: 3, publicUrl: 'https://tether-1.example.com' });
    expect(config).toMatchObject({ nodeId: 'node-a.1', leaseMs: 1_000, workspacesDir: resolve('shared/ws') });
    expect(config.secretsKey).toEqual(key);
    expect(loadConfig({ TETHER_SECRETS_KEY: key.toString('hex') }).secretsKey).toEqual(key);
  });

  it('refuse a bad node id, a lease under 200 ms, replicas without a NATS cluster, a public URL that is not http(s) and a key that is not 32 bytes, never echoing the key', () => {
    expect(() => loadConfig({ TETHER_NODE_ID: 'a b' })).toThrow(/TETHER_NODE_ID/);
    expect(() => loadConfig({ TETHER_LEASE_MS: '50' })).toThrow(/TETHER_LEASE_MS/);
    expect(() => loadConfig({ TETHER_REPLICAS: '3' })).toThrow(/TETHER_REPLICAS: 3 replicas need a NATS cluster/);
    expect(() => loadConfig({ TETHER_REPLICAS: '6', NATS_URL: 'nats://a:4222' })).toThrow(/TETHER_REPLICAS/);
    expect(() => loadConfig({ TETHER_PUBLIC_URL: 'ftp://x' })).toThrow(/TETHER_PUBLIC_URL/);
    const short = 'c2hvcnQta2V5LXNlY3JldC12YWx1ZQ==';
    let message = '';
    try {
      loadConfig({ TETHER_SECRETS_KEY: short });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      message = (err as Error).message;
    }
    expect(message).toMatch(/TETHER_SECRETS_KEY/);
    expect(message).not.toContain(short);
  });
});

describe('the workspace settings', () => {
  it('default to a sandbox where bwrap runs, with the network on, a 2 minute clone and no file URLs', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({ sandbox: { mode: 'auto', network: true }, repoFileUrls: false });
    expect(config.limits.cloneTimeoutMs).toBe(120_000);
  });

  it('are read from the environment, and a bad value names its variable', () => {
    const config = loadConfig({
      TETHER_SANDBOX: 'bwrap',
      TETHER_SANDBOX_NETWORK: 'none',
      TETHER_CLONE_TIMEOUT_MS: '5000',
      TETHER_REPO_FILE_URLS: 'allow',
    });
    expect(config).toMatchObject({ sandbox: { mode: 'bwrap', network: false }, repoFileUrls: true });
    expect(config.limits.cloneTimeoutMs).toBe(5_000);
    expect(() => loadConfig({ TETHER_SANDBOX: 'docker' })).toThrow(/TETHER_SANDBOX: use auto, bwrap or none/);
    expect(() => loadConfig({ TETHER_SANDBOX_NETWORK: 'off' })).toThrow(/TETHER_SANDBOX_NETWORK: use on or none/);
    expect(() => loadConfig({ TETHER_CLONE_TIMEOUT_MS: '0' })).toThrow(/TETHER_CLONE_TIMEOUT_MS/);
  });
});

describe('the tool settings', () => {
  it('default to no MCP server, 32 live on a node, a 60 s call, and unrated calls waiting in confirmation mode', () => {
    const config = loadConfig({});
    expect(config.mcp).toEqual({ servers: {}, maxLive: 32, callTimeoutMs: 60_000 });
    expect(config.confirmUnknown).toBe(true);
  });

  it('are read from the environment, and a bad value names its variable', () => {
    const config = loadConfig({
      TETHER_MCP_SERVERS: '{"fs": {"command": "mcp-fs", "args": ["."]}, "web": {"url": "http://127.0.0.1:9/mcp"}}',
      TETHER_MCP_MAX_LIVE: '4',
      TETHER_MCP_CALL_TIMEOUT_MS: '500',
      TETHER_CONFIRM_UNKNOWN: 'false',
    });
    expect(config.mcp).toEqual({
      servers: { fs: { command: 'mcp-fs', args: ['.'], env: {} }, web: { url: 'http://127.0.0.1:9/mcp' } },
      maxLive: 4,
      callTimeoutMs: 500,
    });
    expect(config.confirmUnknown).toBe(false);
    expect(() => loadConfig({ TETHER_MCP_SERVERS: '{"fs": ' })).toThrow(/TETHER_MCP_SERVERS: use a JSON object/);
    expect(() => loadConfig({ TETHER_MCP_SERVERS: '{"a__b": {"url": "http://x"}}' })).toThrow(/TETHER_MCP_SERVERS/);
    expect(() => loadConfig({ TETHER_CONFIRM_UNKNOWN: 'maybe' })).toThrow(/TETHER_CONFIRM_UNKNOWN: use true or false/);
  });
});
