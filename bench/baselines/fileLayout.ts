// Baseline (c3): a conversation's events kept as OpenHands' file store keeps them
// (openhands/events/stream.py writes, event_store.py reads), in a temporary directory:
//   sessions/<sid>/events/<id>.json                one file per event
//   sessions/<sid>/event_cache/<start>-<end>.json  a page of 25 events, written once full
import { mkdirSync, readdirSync, readFileSync, statfsSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fmt, median } from '../harness/measure.ts';

/** OpenHands' `EventStore.cache_size`: events per page. */
export const PAGE_SIZE = 25;
const FILESYSTEMS: Record<number, string> = { 0xef53: 'ext4', 0x01021994: 'tmpfs', 0x794c7630: 'overlayfs' };

export type FileLayout = Awaited<ReturnType<typeof writeFileLayout>>;

/** Writes the events in order as `EventStream.add_event` does: the event's file, then the page it filled (a last page not full is never written). */
export async function writeFileLayout(sid: string, json: readonly string[]) {
  const root = await mkdtemp(join(tmpdir(), 'tether-bench-files-'));
  const dir = join(root, 'sessions', sid);
  mkdirSync(join(dir, 'events'), { recursive: true });
  mkdirSync(join(dir, 'event_cache'));
  const t0 = performance.now();
  let bytes = 0;
  for (const [id, e] of json.entries()) {
    writeFileSync(join(dir, 'events', `${id}.json`), e);
    bytes += Buffer.byteLength(e);
    if ((id + 1) % PAGE_SIZE) continue;
    const page = `[${json.slice(id + 1 - PAGE_SIZE, id + 1).join(',')}]`;
    writeFileSync(join(dir, 'event_cache', `${id + 1 - PAGE_SIZE}-${id + 1}.json`), page);
    bytes += Buffer.byteLength(page);
  }
  const pages = Math.floor(json.length / PAGE_SIZE);
  const remove = () => rm(root, { recursive: true, force: true });
  return { root, dir, events: json.length, pages, bytes, writeMs: performance.now() - t0, remove };
}

const readPage = (path: string): unknown[] | null => {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as unknown[];
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
};

/**
 * Reads it all back as OpenHands' EventStore does from id 0: `readdir` of events/ for the next id, then
 * per id its page (one read + JSON.parse per 25) or, with no page, its own file; synchronous, one at a time.
 */
export function readFileLayout(l: FileLayout, pages = true): { ms: number; listMs: number } {
  const t0 = performance.now();
  let next = 0;
  for (const name of readdirSync(join(l.dir, 'events'))) next = Math.max(next, Number.parseInt(name, 10) + 1);
  const listMs = performance.now() - t0;
  const events: unknown[] = [];
  let page: unknown[] | null = null;
  for (let i = 0; i < next; i++) {
    const start = i - (i % PAGE_SIZE);
    if (i === start) page = pages ? readPage(join(l.dir, 'event_cache', `${start}-${start + PAGE_SIZE}.json`)) : null;
    events.push(page ? page[i - start] : JSON.parse(readFileSync(join(l.dir, 'events', `${i}.json`), 'utf8')));
  }
  const ms = performance.now() - t0;
  if (events.length !== l.events || events.some((e, i) => (e as { id?: number }).id !== i))
    throw new Error(`the file layout read back ${events.length} events, not ${l.events} in id order`);
  return { ms, listMs };
}

/** What was written, and where a read's time goes (`runs` reads timed apart, with and without the pages). */
export function fileLayoutNote(l: FileLayout, runs: number): string {
  const reads = Array.from({ length: runs }, () => readFileLayout(l));
  const singles = median(Array.from({ length: runs }, () => readFileLayout(l, false).ms));
  const fs = FILESYSTEMS[statfsSync(l.root).type] ?? `filesystem 0x${statfsSync(l.root).type.toString(16)}`;
  return (
    `File layout (c3): ${fmt.int(l.events)} event files and ${fmt.int(l.pages)} pages (${fmt.mib(l.bytes)} MiB) on ${fs}, written in ${fmt.int(l.writeMs)} ms. ` +
    `A read, timed apart (median of ${runs}): \`readdir\` of events/ ${fmt.ms(median(reads.map((r) => r.listMs)))} ms, then the pages with their JSON.parse ${fmt.ms(median(reads.map((r) => r.ms - r.listMs)))} ms; ignoring the pages (every event from its own file) ${fmt.ms(singles)} ms.`
  );
}
