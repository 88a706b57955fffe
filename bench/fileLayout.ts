// The baseline layout for rehydration: a conversation's events stored the way
// OpenHands' file store keeps them (openhands/events/stream.py writes,
// openhands/events/event_store.py reads back), here in a temporary directory:
//   sessions/<sid>/events/<id>.json                one file per event
//   sessions/<sid>/event_cache/<start>-<end>.json  a page of 25 events, written once full
import { mkdirSync, readdirSync, readFileSync, statfsSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { JetStreamClient } from '@nats-io/jetstream';
import { within } from './measure.ts';

/** OpenHands' `EventStore.cache_size`: events per `event_cache` page. */
export const PAGE_SIZE = 25;

export interface FileLayout {
  root: string;
  conversationId: string;
  events: number;
  pages: number;
  bytes: number;
  writeMs: number;
  remove(): Promise<void>;
}

export interface FileLayoutRead {
  ms: number;
  /** `readdir` of the events directory, which is how OpenHands' EventStore finds its next id. */
  listMs: number;
  events: unknown[];
  pagesRead: number;
  singlesRead: number;
}

const conversationDir = (root: string, sid: string) => join(root, 'sessions', sid);

/**
 * The stored bytes of a conversation's events, in order, exactly as JetStream
 * holds them: one ordered consumer on the subject, drained until nothing is pending.
 */
export async function storedEventJson(
  js: JetStreamClient,
  stream: string,
  subject: string,
  count: number,
  timeoutMs: number,
): Promise<string[]> {
  const consumer = await js.consumers.get(stream, { filter_subjects: subject });
  const messages = await consumer.consume({ max_messages: 1000 });
  const out: string[] = [];
  await within(
    timeoutMs,
    'reading the stored events for the file layout',
    (async () => {
      for await (const m of messages) {
        out.push(m.string());
        if (m.info.pending === 0) break;
      }
    })(),
  );
  consumer.delete().catch(() => {});
  if (out.length !== count) throw new Error(`read ${out.length} stored events for the file layout, expected ${count}`);
  return out;
}

/**
 * Writes the events as OpenHands' EventStream.add_event does, one after the
 * other: the event's own file, then, when the write page just filled up, the
 * page. A last page that is not full is never written (its events exist only
 * as single files), as in OpenHands.
 */
export async function writeFileLayout(conversationId: string, eventJson: readonly string[]): Promise<FileLayout> {
  const root = await mkdtemp(join(tmpdir(), 'tether-bench-files-'));
  const remove = () => rm(root, { recursive: true, force: true });
  try {
    const dir = conversationDir(root, conversationId);
    mkdirSync(join(dir, 'events'), { recursive: true });
    mkdirSync(join(dir, 'event_cache'), { recursive: true });
    const t0 = performance.now();
    let page: string[] = [];
    let pages = 0;
    let bytes = 0;
    for (const [id, json] of eventJson.entries()) {
      if ((JSON.parse(json) as { id?: unknown }).id !== id)
        throw new Error(`stored event ${id} does not carry id ${id}`);
      writeFileSync(join(dir, 'events', `${id}.json`), json);
      bytes += Buffer.byteLength(json);
      page.push(json);
      if (page.length === PAGE_SIZE) {
        const start = id + 1 - PAGE_SIZE;
        const contents = `[${page.join(',')}]`;
        writeFileSync(join(dir, 'event_cache', `${start}-${start + PAGE_SIZE}.json`), contents);
        bytes += Buffer.byteLength(contents);
        pages++;
        page = [];
      }
    }
    return { root, conversationId, events: eventJson.length, pages, bytes, writeMs: performance.now() - t0, remove };
  } catch (err) {
    await remove();
    throw err;
  }
}

/**
 * Reads the whole conversation back as OpenHands' EventStore does when a
 * conversation is loaded and its events searched from 0: list the events
 * directory to find the next id (the highest file name + 1), then for each id
 * in order use the page that covers it (read and JSON.parse once per page of
 * 25) or, where there is no page, read and JSON.parse the event's own file.
 * Synchronous reads, one file at a time, as its LocalFileStore does.
 * `pages: false` ignores the pages: every event from its own file.
 */
export function readFileLayout(layout: FileLayout, options: { pages?: boolean } = {}): FileLayoutRead {
  const usePages = options.pages ?? true;
  const dir = conversationDir(layout.root, layout.conversationId);
  const t0 = performance.now();
  let curId = 0;
  for (const name of readdirSync(join(dir, 'events'))) {
    const id = Number.parseInt(name.split('.')[0]!, 10);
    if (id >= curId) curId = id + 1;
  }
  const listMs = performance.now() - t0;
  const events: unknown[] = [];
  let page: { start: number; end: number; events: unknown[] | null } = { start: 1, end: -1, events: null };
  let pagesRead = 0;
  let singlesRead = 0;
  for (let index = 0; index < curId; index++) {
    if (index < page.start || index >= page.end) {
      const start = index - (index % PAGE_SIZE);
      page = {
        start,
        end: start + PAGE_SIZE,
        events: usePages ? readPage(join(dir, 'event_cache', `${start}-${start + PAGE_SIZE}.json`)) : null,
      };
      if (page.events) pagesRead++;
    }
    if (page.events) events.push(page.events[index - page.start]);
    else {
      events.push(JSON.parse(readFileSync(join(dir, 'events', `${index}.json`), 'utf8')));
      singlesRead++;
    }
  }
  const ms = performance.now() - t0;
  if (events.length !== layout.events)
    throw new Error(`the file layout read ${events.length} events, expected ${layout.events}`);
  events.forEach((e, i) => {
    if ((e as { id?: unknown }).id !== i) throw new Error(`the file layout read event ${i} out of order`);
  });
  return { ms, listMs, events, pagesRead, singlesRead };
}

function readPage(path: string): unknown[] | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  return JSON.parse(text) as unknown[];
}

const FILESYSTEMS: Record<number, string> = {
  0xef53: 'ext4',
  0x01021994: 'tmpfs',
  0x794c7630: 'overlayfs',
  0x58465342: 'xfs',
  0x9123683e: 'btrfs',
};

/** The kind of filesystem the layout lives on, for the settings text. */
export function filesystemOf(layout: FileLayout): string {
  const type = statfsSync(layout.root).type;
  return FILESYSTEMS[type] ?? `filesystem type 0x${type.toString(16)}`;
}
