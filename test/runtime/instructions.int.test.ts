import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toChatMessages } from '../../src/agent/chatTranscript.ts';
import { MAX_INSTRUCTIONS_BYTES, readInstructions } from '../../src/workspace/instructions.ts';
import type { StoredEvent } from '../../protocol/index.ts';

let root: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-instructions-'));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

async function workspace(name: string, files: Record<string, string>): Promise<string> {
  const dir = join(root, name);
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  await mkdir(dir, { recursive: true });
  return dir;
}

describe("a repository's instruction files", () => {
  it('reads AGENTS.md, then .openhands/microagents/repo.md, and nothing else', async () => {
    const dir = await workspace('both', {
      'AGENTS.md': 'Use tabs.',
      '.openhands/microagents/repo.md': 'make test',
      'README.md': 'not instructions',
    });
    expect(await readInstructions(dir)).toEqual([
      { path: 'AGENTS.md', text: 'Use tabs.', bytes: 9, truncated: false },
      { path: '.openhands/microagents/repo.md', text: 'make test', bytes: 9, truncated: false },
    ]);
    expect(await readInstructions(await workspace('none', {}))).toEqual([]);
  });

  it('cuts a file at 64 KiB on a character boundary and says so', async () => {
    // 'é' is two bytes: an odd offset puts the cut inside one.
    const text = `a${'é'.repeat(MAX_INSTRUCTIONS_BYTES)}`;
    const [file] = await readInstructions(await workspace('big', { 'AGENTS.md': text }));
    expect(file).toMatchObject({ path: 'AGENTS.md', bytes: Buffer.byteLength(text), truncated: true });
    expect(Buffer.byteLength(file!.text)).toBe(MAX_INSTRUCTIONS_BYTES - 1);
    expect(text.startsWith(file!.text)).toBe(true);
  });

  it('follows no symlink out of the workspace', async () => {
    const outside = join(root, 'secret.txt');
    await writeFile(outside, 'the server key');
    const dir = await workspace('links', {});
    await symlink(outside, join(dir, 'AGENTS.md'));
    await mkdir(join(dir, '.openhands'), { recursive: true });
    await symlink(root, join(dir, '.openhands', 'microagents'));
    await writeFile(join(root, 'repo.md'), 'outside too');
    expect(await readInstructions(dir)).toEqual([]);
  });

  it('reach the system prompt before the conversation own instructions, from the stored fact alone', () => {
    const at = { v: 1 as const, conversation_id: 'c1', ts: '2026-01-01T00:00:00.000Z', source: 'environment' as const };
    const created: StoredEvent = {
      ...at,
      id: 0,
      source: 'user',
      type: 'conversation_created',
      data: {
        user: 'u',
        confirmation_mode: false,
        max_iterations: 5,
        instructions: 'Say hi.',
        secret_names: [],
        replay: false,
      },
    };
    const loaded: StoredEvent = {
      ...at,
      id: 1,
      type: 'instructions_loaded',
      data: { files: [{ path: 'AGENTS.md', text: 'Use tabs.', bytes: 70_000, truncated: true }] },
    };
    const [system] = toChatMessages([created, loaded]);
    const content = String(system!.content);
    expect(content).toContain(
      "Instructions from the repository's AGENTS.md:\nUse tabs.\n[cut: the file has 70000 bytes]",
    );
    expect(content.indexOf('Use tabs.')).toBeLessThan(content.indexOf('Instructions for this conversation:\nSay hi.'));
    expect(String(toChatMessages([created])[0]!.content)).not.toContain('Use tabs.');
  });
});
