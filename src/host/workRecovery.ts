import pLimit from 'p-limit';
import { errorFields, type Logger } from '../logger.ts';
import type { ConversationEntry, ConversationStore, DeleteRecord, EventLog, WorkMarker } from '../store/index.ts';
import { settledAfterCrash, wasMidTask } from '../conversation/conversationIndex.ts';
import type { Ownership } from '../cluster/ownership.ts';

export interface RecoveryHost {
  /** Whether the conversation is live, being rehydrated, created or forked in this process. */
  here(conversationId: string): boolean;
  /** Brings the conversation back into memory here. */
  rehydrate(entry: ConversationEntry): Promise<unknown>;
  /** Runs `work` alone among this conversation's claims, rehydrations and releases on this node. */
  exclusive<T>(conversationId: string, work: () => Promise<T>): Promise<T>;
}

export interface RecoveryDeps {
  conversations: ConversationStore;
  log: EventLog;
  ownership: Ownership;
  logger: Logger;
  /** Markers looked at once. */
  concurrency: number;
  /** Removes what is kept of a conversation that has no record (half a creation or a fork), its workspace included. */
  purge: (conversationId: string, user: string) => Promise<void>;
  /** Finishes a delete a process began and did not end. */
  finishDelete: (record: DeleteRecord) => Promise<void>;
  /** Waits before each new run after one that could not finish something (the last repeats). */
  retryDelaysMs?: readonly number[];
}

/**
 * A run that failed somewhere is made again after these waits, the last
 * repeating until one succeeds: soon for what a store's short absence cut,
 * then seldom for what keeps failing (each run lists every marker again).
 */
const RETRY_DELAYS_MS = [1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000];

/** One run: how many conversations came back, and whether something could not be looked at or finished. */
interface RunResult {
  count: number;
  failed: boolean;
}

/**
 * Brings back every conversation whose log ends in the middle of a task, so
 * it finishes by itself: after a restart, after this node's lease came back,
 * and when another node's heartbeat lapsed. Only conversations with a work
 * marker (in memory or possibly busy when their process stopped) are looked
 * at, and only the unsettled ones' logs are read: an idle conversation costs
 * no log read. Only markers of conversations without a live owner (or owned
 * by this node) are taken: each is claimed first, and given up again when it
 * was idle. Deletes under way with no live owner are finished first (their
 * markers are then not looked at). One run at a time; one asked for meanwhile runs after it.
 * A run that could not finish something (a store that did not answer) is made
 * again after a wait, until one finishes everything: nothing else would ask
 * for it on a node alone.
 */
export class WorkRecovery {
  readonly #host: RecoveryHost;
  readonly #deps: RecoveryDeps;
  #running: Promise<number> | null = null;
  #again = false;
  #stopped = false;
  #retries = 0;
  #retryTimer: NodeJS.Timeout | null = null;

  constructor(host: RecoveryHost, deps: RecoveryDeps) {
    this.#host = host;
    this.#deps = deps;
  }

  /** How many conversations came back. */
  run(): Promise<number> {
    if (this.#running) {
      this.#again = true;
      return this.#running;
    }
    this.#cancelRetry();
    const loop = async (): Promise<number> => {
      let count = 0;
      let failed = false;
      try {
        do {
          this.#again = false;
          const result = await this.#once();
          count += result.count;
          // A later pass looks at everything again: its result is the run's.
          failed = result.failed;
        } while (this.#again && !this.#stopped);
      } catch (err) {
        failed = true;
        throw err;
      } finally {
        this.#afterRun(failed);
      }
      return count;
    };
    this.#running = loop().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  /** No run starts after this (a draining node takes nothing over). */
  stop(): void {
    this.#stopped = true;
    this.#cancelRetry();
  }

  /** Resolves once no run is under way. */
  async settled(): Promise<void> {
    await this.#running?.catch(() => undefined);
  }

  /** After a run that failed somewhere, another one later; after a clean one, the waits start over. */
  #afterRun(failed: boolean): void {
    if (!failed) {
      this.#retries = 0;
      return;
    }
    if (this.#stopped) return;
    const delays = this.#deps.retryDelaysMs ?? RETRY_DELAYS_MS;
    const delay = delays[Math.min(this.#retries, delays.length - 1)]!;
    this.#retries++;
    this.#deps.logger.warn('recovery left something unfinished; it runs again', { retry_in_ms: delay });
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      void this.run().catch((err: unknown) => this.#deps.logger.error('recovery failed', errorFields(err)));
    }, delay);
    this.#retryTimer.unref();
  }

  #cancelRetry(): void {
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
  }

  async #once(): Promise<RunResult> {
    if (this.#stopped) return { count: 0, failed: false };
    const { conversations, log, ownership, logger } = this.#deps;
    const { deleting, failed: deleteFailed } = await this.#finishDeletes();
    let failed = deleteFailed;
    const markers = (await conversations.markers()).filter((m) => !deleting.has(m.conversation_id));
    const probe = pLimit(this.#deps.concurrency);
    const found = await Promise.all(
      markers.map((marker) =>
        probe(async () => {
          const id = marker.conversation_id;
          try {
            // Claimed, read and released (idle) or its rehydration registered, with no other claim or release of it between.
            return await this.#host.exclusive(id, async () => {
              if (this.#host.here(id)) return undefined;
              if (!(await ownership.route(id)).local) return undefined;
              const entry = await recoverMarker(marker, conversations, log, this.#deps.purge);
              if (!entry) await ownership.release(id);
              return entry && { rehydrating: this.#host.rehydrate(entry) };
            });
          } catch (err) {
            logger.warn('recovering a conversation failed', { conversation_id: id, ...errorFields(err) });
            failed = true;
            return undefined;
          }
        }),
      ),
    );
    const chosen = found.filter((step) => step !== undefined);
    await Promise.allSettled(chosen.map((step) => step.rehydrating));
    if (chosen.length > 0) logger.info('recovered conversations', { count: chosen.length });
    return { count: chosen.length, failed };
  }

  /** Finishes the deletes whose process is gone (claimed first, like a marker); the ids of every delete under way. */
  async #finishDeletes(): Promise<{ deleting: Set<string>; failed: boolean }> {
    const { conversations, ownership, logger } = this.#deps;
    const records = await conversations.deletions();
    let failed = false;
    for (const record of records) {
      const id = record.conversation_id;
      try {
        await this.#host.exclusive(id, async () => {
          if (this.#host.here(id)) return;
          if (!(await ownership.route(id)).local) return;
          logger.info('finishing a delete a stopped process began', { conversation_id: id });
          await this.#deps.finishDelete(record);
        });
      } catch (err) {
        logger.warn('finishing a delete failed', { conversation_id: id, ...errorFields(err) });
        failed = true;
      }
    }
    return { deleting: new Set(records.map((r) => r.conversation_id)), failed };
  }
}

/**
 * After a restart, one work marker left by a process that is gone: returns
 * the entry of a conversation to bring back (mid-task), or undefined once the
 * marker is settled. A settled marker (in memory, idle) costs no log read: its
 * entry already holds its state and only leaves memory. An unsettled one
 * (busy, or a state change under way) costs one read of its last event, which
 * says whether it was mid-task and, if not, the state the entry must hold.
 */
export async function recoverMarker(
  marker: WorkMarker,
  conversations: ConversationStore,
  log: EventLog,
  purge: (conversationId: string, user: string) => Promise<void>,
): Promise<ConversationEntry | undefined> {
  const id = marker.conversation_id;
  const entry = await conversations.get(marker.user, id);
  if (!entry) {
    // No record: a creation or a fork cut off before its record was written (never listed,
    // never answered): what it stored goes, its workspace too. (A delete removes the marker with
    // the record, and one cut off before is finished from its delete record first.)
    await purge(id, marker.user);
    return undefined;
  }
  // Not mid-task: the entry is what its last event (unsettled) or the entry itself (settled) says, out of memory.
  const last = marker.unsettled ? await log.last(id) : undefined;
  if (marker.unsettled && wasMidTask(last)) return entry;
  const settled = settledAfterCrash(entry, last);
  if (settled.in_memory !== entry.in_memory || settled.state !== entry.state) await conversations.put(settled);
  await conversations.unmark(id);
  return undefined;
}
