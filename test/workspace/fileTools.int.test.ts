import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_READ_CHARS, readWorkspaceFile, writeWorkspaceFile } from '../../src/workspace/fileTools.ts';

let root: string;
let outside: string;
let workspace: string;
let count = 0;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tether-file-tools-'));
  outside = join(root, 'outside');
  await mkdir(outside);
  await writeFile(join(outside, 'secret.txt'), 'the server key');
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

beforeEach(async () => {
  workspace = join(root, `workspace-${++count}`);
  await mkdir(workspace);
});

/** The outside folder holds exactly the secret: nothing was written there. */
async function expectOutsideUntouched(): Promise<void> {
  expect(await readdir(outside, { recursive: true })).toEqual(['secret.txt']);
  expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('the server key');
}

describe('read_file', () => {
  it('returns the text of a file inside the workspace as is', async () => {
    await mkdir(join(workspace, 'src'));
    await writeFile(join(workspace, 'src', 'a.ts'), 'export const a = 1;\n');
    expect(await readWorkspaceFile(workspace, 'src/a.ts')).toEqual({ output: 'export const a = 1;\n', isError: false });
    expect(await readWorkspaceFile(workspace, './src/a.ts')).toEqual({
      output: 'export const a = 1;\n',
      isError: false,
    });
    const absolute = await readWorkspaceFile(workspace, join(workspace, 'src', 'a.ts'));
    expect(absolute).toEqual({ output: 'export const a = 1;\n', isError: false });
  });

  it('says a missing file does not exist', async () => {
    expect(await readWorkspaceFile(workspace, 'nope.txt')).toEqual({
      output: 'Cannot read nope.txt: it does not exist.',
      isError: true,
    });
  });

  it('refuses a folder', async () => {
    await mkdir(join(workspace, 'src'));
    expect(await readWorkspaceFile(workspace, 'src')).toEqual({
      output: 'Cannot read src: it is a folder, not a file.',
      isError: true,
    });
  });

  it('refuses a path outside the workspace, by .., absolute path, symlinked file or folder', async () => {
    await symlink(join(outside, 'secret.txt'), join(workspace, 'link.txt'));
    await symlink(outside, join(workspace, 'linked'));
    const paths = [
      '../outside/secret.txt',
      join(outside, 'secret.txt'),
      '/etc/passwd',
      'link.txt',
      'linked/secret.txt',
    ];
    for (const path of paths) {
      const result = await readWorkspaceFile(workspace, path);
      expect(result.isError).toBe(true);
      expect(result.output).toBe(
        `Cannot read ${path}: it is outside the workspace (symlinks followed); file tools stay inside it.`,
      );
    }
    // A missing file outside is outside too: nothing says what exists there.
    expect((await readWorkspaceFile(workspace, 'linked/nope.txt')).output).toMatch(/outside the workspace/);
  });

  it('refuses a FIFO without waiting for a writer', async () => {
    execFileSync('mkfifo', [join(workspace, 'pipe')]);
    expect(await readWorkspaceFile(workspace, 'pipe')).toEqual({
      output: 'Cannot read pipe: it is not a regular file.',
      isError: true,
    });
  });

  it('cuts a big file after MAX_READ_CHARS characters and says how big it was', async () => {
    // '😀' is two code units and four bytes: an odd limit would split one.
    const text = `a${'😀'.repeat(MAX_READ_CHARS)}`;
    await writeFile(join(workspace, 'big.txt'), text);
    const { output, isError } = await readWorkspaceFile(workspace, 'big.txt');
    expect(isError).toBe(false);
    const [shown, note] = output.split('\n\n');
    expect(text.startsWith(shown!)).toBe(true);
    expect(shown!.length).toBe(MAX_READ_CHARS - 1);
    expect(note).toBe(
      `[big.txt is ${Buffer.byteLength(text)} bytes: cut after its first ${MAX_READ_CHARS - 1} characters.]`,
    );
  });

  it('cuts a file of more bytes than it reads on a character boundary', async () => {
    const text = 'x'.repeat(MAX_READ_CHARS * 5);
    await writeFile(join(workspace, 'huge.txt'), text);
    const { output, isError } = await readWorkspaceFile(workspace, 'huge.txt');
    expect(isError).toBe(false);
    expect(output).toBe(
      `${'x'.repeat(MAX_READ_CHARS)}\n\n[huge.txt is ${text.length} bytes: cut after its first ${MAX_READ_CHARS} characters.]`,
    );
  });

  it('refuses a binary file and gives its size only', async () => {
    await writeFile(join(workspace, 'a.bin'), Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0x00, 0x01]));
    expect(await readWorkspaceFile(workspace, 'a.bin')).toEqual({
      output: 'Cannot read a.bin: it is a binary file (6 bytes); its content is not shown.',
      isError: true,
    });
  });
});

describe('write_file', () => {
  it('creates a file and its missing folders', async () => {
    expect(await writeWorkspaceFile(workspace, 'src/deep/er/a.ts', 'été\n')).toEqual({
      output: 'Wrote 6 bytes to src/deep/er/a.ts.',
      isError: false,
    });
    expect(await readFile(join(workspace, 'src/deep/er/a.ts'), 'utf8')).toBe('été\n');
  });

  it('replaces a file and keeps its mode', async () => {
    const file = join(workspace, 'run.sh');
    await writeFile(file, 'a much longer first version\n');
    await chmod(file, 0o750);
    expect((await writeWorkspaceFile(workspace, './run.sh', 'v2\n')).isError).toBe(false);
    expect(await readFile(file, 'utf8')).toBe('v2\n');
    expect((await stat(file)).mode & 0o777).toBe(0o750);
    expect((await writeWorkspaceFile(workspace, file, 'v3\n')).output).toBe(`Wrote 3 bytes to ${file}.`);
    expect(await readFile(file, 'utf8')).toBe('v3\n');
  });

  it('refuses a path outside the workspace, by .., absolute path, symlinked folder or symlink target', async () => {
    await symlink(join(outside, 'secret.txt'), join(workspace, 'link.txt'));
    await symlink(outside, join(workspace, 'linked'));
    const paths = [
      '../outside/new.txt',
      join(outside, 'secret.txt'),
      'link.txt',
      'linked/secret.txt',
      'linked/new.txt',
      'linked/sub/new.txt',
    ];
    for (const path of paths) {
      expect(await writeWorkspaceFile(workspace, path, 'pwned')).toEqual({
        output: `Cannot write ${path}: it is outside the workspace (symlinks followed); file tools stay inside it.`,
        isError: true,
      });
    }
    await expectOutsideUntouched();
  });

  it('refuses to write through a broken symlink, or make a folder where one stands', async () => {
    await symlink(join(outside, 'missing.txt'), join(workspace, 'dangling.txt'));
    await symlink(join(outside, 'missing'), join(workspace, 'dangling'));
    expect(await writeWorkspaceFile(workspace, 'dangling.txt', 'pwned')).toEqual({
      output: 'Cannot write dangling.txt: it is a symlink that is broken or loops.',
      isError: true,
    });
    expect(await writeWorkspaceFile(workspace, 'dangling/new.txt', 'pwned')).toEqual({
      output:
        'Cannot write dangling/new.txt: something already stands where a folder is needed (a file or a broken symlink).',
      isError: true,
    });
    await expectOutsideUntouched();
  });

  it('writes through a symlink that stays inside the workspace', async () => {
    await mkdir(join(workspace, 'real'));
    await writeFile(join(workspace, 'real', 'a.txt'), 'old');
    await symlink(join(workspace, 'real', 'a.txt'), join(workspace, 'alias.txt'));
    await symlink('real', join(workspace, 'folder'));
    expect((await writeWorkspaceFile(workspace, 'alias.txt', 'via file link')).isError).toBe(false);
    expect(await readFile(join(workspace, 'real', 'a.txt'), 'utf8')).toBe('via file link');
    expect((await writeWorkspaceFile(workspace, 'folder/b/c.txt', 'via folder link')).isError).toBe(false);
    expect(await readFile(join(workspace, 'real', 'b', 'c.txt'), 'utf8')).toBe('via folder link');
  });

  it('refuses an empty path, a path with a NUL byte and a path that ends with a slash', async () => {
    expect(await writeWorkspaceFile(workspace, '', 'x')).toEqual({
      output: 'Cannot write a file: the path is empty.',
      isError: true,
    });
    expect((await writeWorkspaceFile(workspace, 'a\0b', 'x')).output).toBe(
      'Cannot write "a\\u0000b": a path cannot hold a NUL byte.',
    );
    expect(await writeWorkspaceFile(workspace, 'new/', 'x')).toEqual({
      output: 'Cannot write new/: it names a folder.',
      isError: true,
    });
    expect(await readdir(workspace)).toEqual([]);
  });

  it('refuses a folder, a FIFO and a path below a file', async () => {
    await mkdir(join(workspace, 'src'));
    await writeFile(join(workspace, 'a.txt'), 'a');
    execFileSync('mkfifo', [join(workspace, 'pipe')]);
    expect(await writeWorkspaceFile(workspace, 'src', 'x')).toEqual({
      output: 'Cannot write src: it is a folder.',
      isError: true,
    });
    expect(await writeWorkspaceFile(workspace, 'pipe', 'x')).toEqual({
      output: 'Cannot write pipe: it is not a regular file.',
      isError: true,
    });
    expect(await writeWorkspaceFile(workspace, 'a.txt/b.txt', 'x')).toEqual({
      output: 'Cannot write a.txt/b.txt: a part of it is a file, not a folder.',
      isError: true,
    });
    expect(await readFile(join(workspace, 'a.txt'), 'utf8')).toBe('a');
  });
});
