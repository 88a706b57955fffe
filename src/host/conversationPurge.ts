import type { Ownership } from '../cluster/ownership.ts';
import type { RuntimeProvider } from '../runtime/index.ts';
import type { CheckpointStore, ConversationStore, DeleteRecord, EventLog, SnapshotStore } from '../store/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { SecretKeeper } from './secretKeeper.ts';

/** Waits before each retry of a delete that failed, in the background; after the last, recovery finishes it. */
const RETRY_DELAYS_MS = [1_000, 2_000, 4_000, 8_000, 16_000, 32_000];

export interface ConversationPurgeDeps {
  log: EventLog;
  snapshots: SnapshotStore;
  checkpoints: CheckpointStore;
  conversations: ConversationStore;
  runtimes: RuntimeProvider;
  secrets: SecretKeeper;
  ownership: Ownership;
  logger: Logger;
}

/** Removes what is kept of a conversation: the one list of what a conversation leaves behind. */
export class ConversationPurge {
  readonly #deps: ConversationPurgeDeps;

  constructor(deps: ConversationPurgeDeps) {
    this.#deps = deps;
  }

  /**
   * Everything of the conversation, each removal leaving no marker behind:
   * its index entry first (its user no longer finds it), then its events,
   * snapshot, checkpoints, secrets, workspace (unless `keepWorkspace`) and
   * owner record. Each step is safe to repeat: a delete cut off half-way is
   * done again from the start (`delete`, or recovery through `finish`).
   */
  async purge(conversationId: string, user: string, keepWorkspace: boolean): Promise<void> {
    const { log, snapshots, checkpoints, conversations, runtimes, secrets, ownership } = this.#deps;
    await conversations.delete(user, conversationId);
    await log.purge(conversationId);
    await snapshots.delete(conversationId);
    await checkpoints.purge(conversationId);
    await secrets.forget(conversationId);
    if (!keepWorkspace) await runtimes.removeWorkspace?.(conversationId);
    await ownership.erase(conversationId);
  }

  /**
   * A delete that a crash can cut anywhere: recorded first (recovery finishes
   * it), the index entry next (its user no longer finds it: no action, connect
   * or claim brings it back while the rest goes), the record removed last. One
   * that fails is tried again in the background, then left to recovery.
   */
  async delete(record: DeleteRecord, beforePurge: () => Promise<void>): Promise<void> {
    await this.#deps.conversations.beginDelete(record);
    await this.#deps.conversations.delete(record.user, record.conversation_id);
    await beforePurge();
    try {
      await this.finish(record);
    } catch (err) {
      this.#retry(record, 0);
      throw err;
    }
  }

  /** Does a recorded delete (again), then removes its record. */
  async finish(record: DeleteRecord): Promise<void> {
    await this.purge(record.conversation_id, record.user, record.keep_workspace);
    await this.#deps.conversations.endDelete(record.conversation_id);
  }

  #retry(record: DeleteRecord, attempt: number): void {
    const delay = RETRY_DELAYS_MS[attempt];
    const id = record.conversation_id;
    if (delay === undefined) {
      this.#deps.logger.warn('delete not finished; recovery finishes it', { conversation_id: id });
      return;
    }
    setTimeout(() => {
      this.finish(record).catch((err: unknown) => {
        this.#deps.logger.warn('delete failed again', { conversation_id: id, ...errorFields(err) });
        this.#retry(record, attempt + 1);
      });
    }, delay).unref();
  }
}
