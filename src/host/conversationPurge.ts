import type { Ownership } from '../cluster/ownership.ts';
import type { RuntimeProvider } from '../runtime/index.ts';
import type { CheckpointStore, ConversationStore, EventLog, SnapshotStore } from '../store/index.ts';
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
   * Events, snapshot, checkpoints, record and marker, secrets, owner record;
   * and its workspace when it was never answered (`unanswered`: half a fork or
   * a creation; a deleted conversation's workspace stays).
   */
  async purge(conversationId: string, user: string, unanswered = false): Promise<void> {
    const { log, snapshots, checkpoints, conversations, runtimes, secrets, ownership } = this.#deps;
    if (unanswered) await runtimes.removeWorkspace?.(conversationId);
    await log.purge(conversationId);
    await snapshots.delete(conversationId);
    await checkpoints.purge(conversationId);
    await conversations.delete(user, conversationId);
    await secrets.forget(conversationId);
    await ownership.release(conversationId);
  }
}
