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
 */
export class WorkRecovery {
  readonly #host: RecoveryHost;
  readonly #deps: RecoveryDeps;
  #running: Promise<number> | null = null;
  #again = false;
  #stopped = false;

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
    const loop = async (): Promise<number> => {
      let count = 0;
      do {
        this.#again = false;
        count += await this.#once();
      } while (this.#again && !this.#stopped);
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
  }

  /** Resolves once no run is under way. */
  async settled(): Promise<void> {
    await this.#running?.catch(() => undefined);
  }

  async #once(): Promise<number> {
    if (this.#stopped) return 0;
    const { conversations, log, ownership, logger } = this.#deps;
    const deleting = await this.#finishDeletes();
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
            return undefined;
          }
        }),
      ),
    );
    const chosen = found.filter((step) => step !== undefined);
    await Promise.allSettled(chosen.map((step) => step.rehydrating));
    if (chosen.length > 0) logger.info('recovered conversations', { count: chosen.length });
    return chosen.length;
  }

  /** Finishes the deletes whose process is gone (claimed first, like a marker); the ids of every delete under way. */
  async #finishDeletes(): Promise<Set<string>> {
    const { conversations, ownership, logger } = this.#deps;
    const records = await conversations.deletions();
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
      }
    }
    return new Set(records.map((r) => r.conversation_id));
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
