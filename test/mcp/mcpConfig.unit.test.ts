import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { McpServersSetting } from '../../src/mcp/index.ts';

// As src/config.ts holds it: the messages then name the variable.
const Config = z.object({ TETHER_MCP_SERVERS: McpServersSetting });

function problems(value: string): string[] {
  const parsed = Config.safeParse({ TETHER_MCP_SERVERS: value });
  if (parsed.success) throw new Error(`${value} was accepted`);
  return parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
}

describe('McpServersSetting', () => {
  it('reads an absent or blank value as no servers', () => {
    expect(Config.parse({}).TETHER_MCP_SERVERS).toEqual({});
    expect(Config.parse({ TETHER_MCP_SERVERS: '  ' }).TETHER_MCP_SERVERS).toEqual({});
  });

  it('reads stdio and streamable HTTP servers, in order, with the defaults of a stdio server', () => {
    const value = JSON.stringify({
      fs: { command: 'mcp-fs', args: ['--root', '.'], env: { LEVEL: 'debug' } },
      web: { url: 'https://mcp.example.com/mcp' },
      'git_2-x': { command: 'mcp-git' },
    });
    const servers = McpServersSetting.parse(value);
    expect(servers).toEqual({
      fs: { command: 'mcp-fs', args: ['--root', '.'], env: { LEVEL: 'debug' } },
      web: { url: 'https://mcp.example.com/mcp' },
      'git_2-x': { command: 'mcp-git', args: [], env: {} },
    });
    expect(Object.keys(servers)).toEqual(['fs', 'web', 'git_2-x']);
  });

  it.each([
    ['{"fs": ', /^TETHER_MCP_SERVERS: use a JSON object \(/],
    ['[1]', /^TETHER_MCP_SERVERS: use a JSON object of servers by name$/],
    ['{"fs": "mcp-fs"}', /^TETHER_MCP_SERVERS\.fs: use an object with a command or a url$/],
    ['{"f s": {"command": "x"}}', /^TETHER_MCP_SERVERS\.f s: use letters, digits, dashes and underscores/],
    ['{"my__fs": {"command": "x"}}', /^TETHER_MCP_SERVERS\.my__fs: a server name must not hold "__"$/],
    [`{"${'a'.repeat(41)}": {"command": "x"}}`, /: use at most 40 characters in a server name$/],
    ['{"fs": {}}', /^TETHER_MCP_SERVERS\.fs\.command: give a command to run \(or a url\)$/],
    ['{"fs": {"command": ""}}', /^TETHER_MCP_SERVERS\.fs\.command: give a non-empty command$/],
    ['{"fs": {"command": "x", "args": "-v"}}', /^TETHER_MCP_SERVERS\.fs\.args: use an array of strings$/],
    ['{"fs": {"command": "x", "args": [1]}}', /^TETHER_MCP_SERVERS\.fs\.args\.0: use strings in args$/],
    ['{"fs": {"command": "x", "env": {"A": 1}}}', /^TETHER_MCP_SERVERS\.fs\.env\.A: use string values in env$/],
    ['{"fs": {"command": "x", "env": {"A=B": "1"}}}', /^TETHER_MCP_SERVERS\.fs\.env\.A=B: use variable names/],
    ['{"fs": {"command": "x", "cwd": "/"}}', /^TETHER_MCP_SERVERS\.fs: Unrecognized key: "cwd"$/],
    ['{"web": {"url": "ftp://example.com"}}', /^TETHER_MCP_SERVERS\.web\.url: use an http or https URL$/],
    ['{"web": {"url": "https://x.example", "command": "x"}}', /^TETHER_MCP_SERVERS\.web: Unrecognized key: "command"$/],
  ])('refuses %s with a message naming what is wrong', (value, message) => {
    expect(problems(value)).toEqual([expect.stringMatching(message)]);
  });
});
