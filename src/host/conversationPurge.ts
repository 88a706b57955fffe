import type { Ownership } from '../cluster/ownership.ts';
import type { RuntimeProvider } from '../runtime/index.ts';
import type { CheckpointStore, ConversationStore, DeleteRecord, EventLog, SnapshotStore } from '../store/index.ts';
import type { SecretKeeper } from './secretKeeper.ts';

export interface ConversationPurgeDeps {
  log: EventLog;
  snapshots: SnapshotStore;
  checkpoints: CheckpointStore;
  conversations: ConversationStore;
  runtimes: RuntimeProvider;
  secrets: SecretKeeper;
  ownership: Ownership;
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

  /** A delete that a crash can cut anywhere: recorded first (recovery finishes it), the record removed last. */
  async delete(record: DeleteRecord, beforePurge: () => Promise<void>): Promise<void> {
    await this.#deps.conversations.beginDelete(record);
    await beforePurge();
    await this.finish(record);
  }

  /** Does a recorded delete (again), then removes its record. */
  async finish(record: DeleteRecord): Promise<void> {
    await this.purge(record.conversation_id, record.user, record.keep_workspace);
    await this.#deps.conversations.endDelete(record.conversation_id);
  }
}
