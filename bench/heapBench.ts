// Starts heapProcess.ts in a node process of its own with --expose-gc (the
// bench itself runs under plain tsx) and waits for its report.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { HeapReport, HeapRequest } from './heapProcess.ts';
import { within } from './measure.ts';

type HeapReply = { ok: true; report: HeapReport } | { ok: false; error: string };

export const HEAP_NODE_FLAGS = ['--expose-gc', '--import', 'tsx'] as const;

export async function heapRun(request: HeapRequest, timeoutMs: number): Promise<HeapReport> {
  const child = fork(fileURLToPath(new URL('./heapProcess.ts', import.meta.url)), [], {
    execArgv: [...HEAP_NODE_FLAGS],
    // The repository root, so that `--import tsx` finds this checkout's tsx wherever the bench was started.
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const reply = new Promise<HeapReply>((resolve, reject) => {
    child.once('message', (message) => resolve(message as HeapReply));
    child.once('error', reject);
    child.once('exit', (code, signal) => reject(new Error(`the heap process exited (${signal ?? code}) before reporting`)));
  });
  try {
    child.send(request);
    const answer = await within(timeoutMs, 'the heap measurement', reply);
    if (!answer.ok) throw new Error(`the heap process failed: ${answer.error}`);
    return answer.report;
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill();
  }
}
