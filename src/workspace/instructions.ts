import { constants } from 'node:fs';
import { open, realpath } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import type { EventOf } from '../../protocol/index.ts';

/** The repository files whose text the agent is told, in this order (OpenHands reads the same two). */
export const INSTRUCTION_FILES = ['AGENTS.md', '.openhands/microagents/repo.md'] as const;

/** The most of each file that is stored and told to the agent. */
export const MAX_INSTRUCTIONS_BYTES = 64 * 1024;

/** One file as stored in `instructions_loaded`. */
export type InstructionsFile = EventOf<'instructions_loaded'>['data']['files'][number];

/**
 * The instruction files at the root of `workspace` that exist and are
 * regular files inside it (a symlink out of the workspace is not followed),
 * each cut at {@link MAX_INSTRUCTIONS_BYTES} on a character's boundary. Read
 * once per conversation and stored: the agent is told what was read then,
 * whatever the files say later.
 */
export async function readInstructions(workspace: string): Promise<InstructionsFile[]> {
  const root = await realpath(resolve(workspace)).catch(() => null);
  if (root === null) return [];
  const files: InstructionsFile[] = [];
  for (const path of INSTRUCTION_FILES) {
    const file = await readCapped(root, path);
    if (file) files.push(file);
  }
  return files;
}

/** `path` under `root` (the workspace, resolved), or null when it is not a regular file inside it. */
async function readCapped(root: string, path: string): Promise<InstructionsFile | null> {
  // Resolved first: a symlink out of the workspace (at the file or a folder above it) is not followed.
  const full = await realpath(join(root, path)).catch(() => null);
  if (full === null || !full.startsWith(root + sep)) return null;
  let handle;
  try {
    // Non-blocking: a FIFO planted there must not hold the read; it is not a regular file anyway.
    handle = await open(full, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(() => null);
    if (!handle) return null;
    const stat = await handle.stat();
    if (!stat.isFile()) return null;
    const buffer = Buffer.alloc(Math.min(stat.size, MAX_INSTRUCTIONS_BYTES + 4));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    const truncated = stat.size > MAX_INSTRUCTIONS_BYTES;
    const kept = truncated ? cutAtCharacter(buffer.subarray(0, MAX_INSTRUCTIONS_BYTES)) : buffer.subarray(0, bytesRead);
    return { path, text: kept.toString('utf8'), bytes: stat.size, truncated };
  } finally {
    await handle?.close();
  }
}

/** The longest prefix that does not end inside a UTF-8 character (also `read_file`'s cut). */
export function cutAtCharacter(bytes: Buffer): Buffer {
  let end = bytes.length;
  // Step back over continuation bytes (10xxxxxx) to the start of the last character, and drop it if incomplete.
  let start = end - 1;
  while (start > 0 && (bytes[start]! & 0xc0) === 0x80) start--;
  const lead = bytes[start]!;
  const length = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  if (start + length > end) end = start;
  return bytes.subarray(0, end);
}
