import { constants } from 'node:fs';
import { mkdir, open, readlink, realpath, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve, sep } from 'node:path';
import { cutAtCharacter } from './instructions.ts';

/** What a file tool tells the model: its output, and whether the call failed. */
export interface FileToolResult {
  output: string;
  isError: boolean;
}

/**
 * The most of a file that `read_file` returns, in characters as JavaScript counts them
 * (a string's `length`, UTF-16 code units); a surrogate pair is never split.
 */
export const MAX_READ_CHARS = 100_000;

/** Enough bytes to hold MAX_READ_CHARS characters of UTF-8 (at most four bytes each). */
const MAX_READ_BYTES = MAX_READ_CHARS * 4;

// These tools run in the server process on the host, not in the sandbox: every path is resolved
// (symlinks followed) and must land inside the workspace before anything is opened. A process of
// the workspace (one the agent left running in the background) could swap a folder on the
// checked path for a symlink between the check and the open; O_NOFOLLOW closes that for the last
// component only. So the open file itself is checked again where the kernel says it is
// (/proc/self/fd): a read reads nothing, and a write truncates and writes nothing, outside the
// workspace. What is left is that such a swap can make a write create an empty file outside.
// Opening each component relative to its parent (openat) would close that too; Node has no such call.

/**
 * The text of `path` (relative to `workspace`, or absolute), as is, cut after
 * {@link MAX_READ_CHARS} characters with a note that says so. A path that is missing, outside
 * the workspace (symlinks followed), not a regular file, or binary (it holds a NUL byte) gives
 * an error result that names `path` as given; this never rejects.
 */
export async function readWorkspaceFile(workspace: string, path: string): Promise<FileToolResult> {
  try {
    const root = await realpath(resolve(workspace)).catch(() => null);
    if (root === null) return failure(`Cannot read ${path}: the workspace does not exist.`);
    const malformed = malformedPath('read', path);
    if (malformed) return malformed;
    const landing = await land(root, resolve(root, path));
    if (!isInside(root, landing.ancestor)) return outside('read', path);
    if (landing.missing.length > 0) return failure(`Cannot read ${path}: it does not exist.`);
    return await readInside(root, landing.ancestor, path);
  } catch (error) {
    return failure(`Cannot read ${path}: ${describe(error)}.`);
  }
}

/**
 * Creates or replaces `path` (relative to `workspace`, or absolute) with exactly `content`
 * (UTF-8). Missing folders are created, inside the workspace only; a file that exists keeps
 * its mode, a new one gets 0666 less the umask. Writing through a symlink that stays inside
 * the workspace is allowed. A path outside the workspace, a folder or a non-regular file gives
 * an error result that names `path` as given; this never rejects.
 */
export async function writeWorkspaceFile(workspace: string, path: string, content: string): Promise<FileToolResult> {
  try {
    const root = await realpath(resolve(workspace)).catch(() => null);
    if (root === null) return failure(`Cannot write ${path}: the workspace does not exist.`);
    const malformed = malformedPath('write', path);
    if (malformed) return malformed;
    if (path.endsWith('/') || path.endsWith(sep)) return failure(`Cannot write ${path}: it names a folder.`);
    const landing = await land(root, resolve(root, path));
    if (!isInside(root, landing.ancestor)) return outside('write', path);
    const target = await prepareTarget(landing, path);
    if (typeof target !== 'string') return target;
    const exists = landing.missing.length === 0;
    // Not truncated on open: only once the open file is known to be inside the workspace.
    const flags = constants.O_WRONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
    const handle = await open(target, exists ? flags : flags | constants.O_CREAT, 0o666);
    try {
      if (!(await openedInside(root, handle.fd))) return outside('write', path);
      // Checked again on the open file: a FIFO or device swapped in since is not written to.
      if (!(await handle.stat()).isFile()) return failure(`Cannot write ${path}: it is not a regular file.`);
      await handle.truncate(0);
      await handle.writeFile(content, 'utf8');
    } finally {
      await handle.close();
    }
    return { output: `Wrote ${Buffer.byteLength(content, 'utf8')} bytes to ${path}.`, isError: false };
  } catch (error) {
    return failure(`Cannot write ${path}: ${describe(error)}.`);
  }
}

/**
 * Where a path lands with every symlink followed: the realpath of its deepest existing
 * ancestor (the path itself when it exists) and the names below it that do not exist yet.
 */
interface Landing {
  ancestor: string;
  missing: string[];
}

/** The landing of `target` (absolute, lexically resolved); a broken symlink counts as missing. */
async function land(root: string, target: string): Promise<Landing> {
  const missing: string[] = [];
  let path = target;
  for (;;) {
    try {
      return { ancestor: await realpath(path), missing };
    } catch (error) {
      const code = codeOf(error);
      // ENOTDIR: a file stands where a folder is needed; the write's own checks say so.
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || path === root || dirname(path) === path) throw error;
      missing.unshift(basename(path));
      path = dirname(path);
    }
  }
}

/**
 * Whether the file open as `fd` is inside `root`, where the kernel says it is: a folder
 * swapped for a symlink after the path was checked shows here. Where /proc is not mounted
 * the path check stands alone.
 */
async function openedInside(root: string, fd: number): Promise<boolean> {
  const where = await readlink(`/proc/self/fd/${fd}`).catch(() => null);
  return where === null || isInside(root, where);
}

/** The text of `full` (a realpath inside the workspace); `path` is the model's name for it. */
async function readInside(root: string, full: string, path: string): Promise<FileToolResult> {
  // Non-blocking: a FIFO there must not hold the server; it is refused as not a regular file.
  const handle = await open(full, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    if (!(await openedInside(root, handle.fd))) return outside('read', path);
    const stats = await handle.stat();
    if (stats.isDirectory()) return failure(`Cannot read ${path}: it is a folder, not a file.`);
    if (!stats.isFile()) return failure(`Cannot read ${path}: it is not a regular file.`);
    const buffer = Buffer.alloc(Math.min(stats.size, MAX_READ_BYTES));
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    const bytes = buffer.subarray(0, length);
    if (bytes.includes(0)) {
      return failure(`Cannot read ${path}: it is a binary file (${stats.size} bytes); its content is not shown.`);
    }
    const whole = length >= stats.size;
    const text = (whole ? bytes : cutAtCharacter(bytes)).toString('utf8');
    if (whole && text.length <= MAX_READ_CHARS) return { output: text, isError: false };
    const shown = cutAtCodeUnit(text, MAX_READ_CHARS);
    const note = `[${path} is ${stats.size} bytes: cut after its first ${shown.length} characters.]`;
    return { output: `${shown}\n\n${note}`, isError: false };
  } finally {
    await handle.close();
  }
}

/**
 * The path to open for a write of `landing` (inside the workspace), with its missing folders
 * created, or the error result that refuses it.
 */
async function prepareTarget(landing: Landing, path: string): Promise<string | FileToolResult> {
  const { ancestor, missing } = landing;
  const stats = await stat(ancestor);
  if (missing.length === 0) {
    if (stats.isDirectory()) return failure(`Cannot write ${path}: it is a folder.`);
    if (!stats.isFile()) return failure(`Cannot write ${path}: it is not a regular file.`);
    return ancestor;
  }
  if (!stats.isDirectory()) return failure(`Cannot write ${path}: a part of it is a file, not a folder.`);
  let folder = ancestor;
  for (const name of missing.slice(0, -1)) {
    folder = join(folder, name);
    // Not recursive: each folder is made in one that is inside, and mkdir follows no symlink
    // at its last component (a broken symlink there fails with EEXIST).
    await mkdir(folder);
  }
  return join(folder, missing.at(-1)!);
}

/** Whether `path` (a realpath) is `root` or below it. */
function isInside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/** The refusal of a path no file can have, before the file system sees it. */
function malformedPath(verb: 'read' | 'write', path: string): FileToolResult | null {
  if (path === '') return failure(`Cannot ${verb} a file: the path is empty.`);
  if (path.includes('\0')) return failure(`Cannot ${verb} ${JSON.stringify(path)}: a path cannot hold a NUL byte.`);
  return null;
}

function outside(verb: 'read' | 'write', path: string): FileToolResult {
  return failure(`Cannot ${verb} ${path}: it is outside the workspace (symlinks followed); file tools stay inside it.`);
}

function failure(output: string): FileToolResult {
  return { output, isError: true };
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A short clause for a file system error, as the model should read it. */
function describe(error: unknown): string {
  switch (codeOf(error)) {
    case 'ENOENT':
      return 'it does not exist';
    case 'EEXIST':
      return 'something already stands where a folder is needed (a file or a broken symlink)';
    case 'ENOTDIR':
      return 'a part of it is a file, not a folder';
    case 'EISDIR':
      return 'it is a folder';
    case 'ELOOP':
      return 'it is a symlink that is broken or loops';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'ENAMETOOLONG':
      return 'the name is too long';
    case 'ENOSPC':
      return 'no space left on the device';
    case 'ENXIO':
      return 'it is not a regular file';
    default:
      return error instanceof Error ? error.message : String(error);
  }
}

/** The longest prefix of `text` at most `max` code units long that does not split a surrogate pair. */
function cutAtCodeUnit(text: string, max: number): string {
  if (text.length <= max) return text;
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}
