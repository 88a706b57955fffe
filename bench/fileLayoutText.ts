// What RESULTS.md says about the file-layout baseline of rows (c3) and (d2).
import { filesystemOf, PAGE_SIZE, readFileLayout, type FileLayout } from './fileLayout.ts';
import { fmt, median, type Repetitions } from './measure.ts';

/** Where the file layout's read time goes (reads timed apart from the rounds), and how it compares with raw JetStream. */
export function fileLayoutNote(layout: FileLayout, rawMs: number, filesMs: number, runs: number): string {
  const reads = Array.from({ length: runs }, () => readFileLayout(layout));
  const last = reads.at(-1)!;
  const list = median(reads.map((r) => r.listMs));
  const rest = median(reads.map((r) => r.ms - r.listMs));
  const singles = median(Array.from({ length: runs }, () => readFileLayout(layout, { pages: false }).ms));
  return (
    `File layout (c3, d2): ${fmt.int(layout.events)} event files and ${fmt.int(layout.pages)} pages (${(layout.bytes / 2 ** 20).toFixed(1)} MiB) written in ${fmt.int(layout.writeMs)} ms. ` +
    `Its read split, timed apart (median of ${reads.length}): \`readdir\` of the ${fmt.int(layout.events)}-entry events directory ${fmt.ms(list)} ms, then ${fmt.int(last.pagesRead)} page reads and ${fmt.int(last.singlesRead)} single-file reads with their JSON.parse ${fmt.ms(rest)} ms. ` +
    `Ignoring the pages (every event read from its own file, ${fmt.int(layout.events)} reads) the same read takes ${fmt.ms(singles)} ms. ` +
    `The raw JetStream read of (d) takes ${fmt.ratio(rawMs / filesMs)}× the file layout's read (with its pages).`
  );
}

export function fileLayoutSetting(layout: FileLayout, reps: Repetitions): string {
  return (
    `(c3, d2) OpenHands' file layout, written by the bench: the conversation's stored-event JSON (the same bytes as on NATS, read back with an ordered consumer) written to a temporary directory on ${filesystemOf(layout)} (removed afterwards) the way OpenHands' \`EventStream.add_event\` stores a conversation (openhands/events/stream.py and event_store.py, storage/locations.py): \`sessions/<id>/events/<n>.json\` for every event, and after every ${PAGE_SIZE}th event \`sessions/<id>/event_cache/<start>-<end>.json\` holding the JSON array of those ${PAGE_SIZE} (a last page that is not full is never written, so its events exist only as single files; here ${fmt.int(layout.events)} events make ${fmt.int(layout.pages)} full pages and ${fmt.int(layout.events - layout.pages * PAGE_SIZE)} single-only events). ` +
    `The reader does what OpenHands' \`EventStore\` does when a conversation is loaded and its events searched from 0: \`readdirSync\` of \`events/\` to find the next id (highest file number + 1), then for each id in order the page that covers it (\`readFileSync\` + one JSON.parse per ${PAGE_SIZE} events) or, where that page is missing, the event's own file (\`readFileSync\` + JSON.parse), one synchronous read at a time as its \`LocalFileStore\` does; checked: every event, in id order. ` +
    `It runs in this node process with the same JSON.parse as the raw JetStream read, so it measures the layout, not OpenHands' Python. ` +
    `The OS page cache was warm: the files had just been written and are read again every round, and nothing evicted them (dropping caches needs root), so no read went to the disk; with a cold cache the file layout would only be slower. ` +
    `Measured in the same rounds as (d): Tether's fold, the raw JetStream read and the file-layout read each once per round, the order turning every round, ${reps.warmups} warm-up + ${reps.runs} measured rounds, median; (c3) sets (c)'s median against this one.`
  );
}
