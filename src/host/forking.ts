import {
  agentStateOf,
  foldEvents,
  sessionMachine,
  SESSION_MACHINE_VERSION,
  type SessionSnapshot,
} from '../../machines/index.ts';
import { errorFields, type Logger } from '../logger.ts';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import type { RuntimeProvider } from '../runtime/index.ts';
import type { CheckpointStore, ConversationEntry, ConversationStore, EventLog } from '../store/index.ts';
import type { ConversationReads } from '../queries/conversationReads.ts';
import { BadSeqError, IllegalTransitionError } from '../errors.ts';
import { projectEntries } from '../conversation/conversationIndex.ts';
import { lastRecordedState } from '../conversation/storedState.ts';
import type { Ownership } from '../cluster/ownership.ts';
import type { SecretKeeper } from './secretKeeper.ts';
import { Session, type SessionDeps } from '../conversation/session.ts';

/** Parent events read per page while a fork copies them. */
const COPY_PAGE = 1_000;

export interface ForkDeps {
  log: EventLog;
  conversations: ConversationStore;
  checkpoints: CheckpointStore;
  runtimes: RuntimeProvider;
  reads: ConversationReads;
  ownership: Ownership;
  secrets: SecretKeeper;
  logger: Logger;
  clock: () => Date;
  newId: () => string;
  checkpointEvery: number;
  /** The deps of the new conversation's session; `known` is its index entry-to-be (its creation time). */
  sessionDeps(conversationId: string, known?: ConversationEntry): SessionDeps;
  /** The fork's session is live here from now on. */
  adopt(session: Session): void;
  /** Everything of a conversation that never got its record (or lost it): events, checkpoints, secrets, marker. */
  purge(conversationId: string, user: string): Promise<void>;
}

/**
 * Forks a conversation: a new conversation of the same user whose first
 * events are copies of the parent's through a stream sequence, followed by
 * `conversation_forked` and what coming back after a crash stores. The
 * parent is only read. The fork's record is written last, by its first
 * decision: until then a work marker without a record says "half a fork",
 * which recovery purges (WorkRecovery), and the list never shows it.
 */
export class ConversationForks {
  readonly #deps: ForkDeps;
  /** Forks being copied by this process: recovery here leaves their markers alone. */
  readonly #copying = new Set<string>();

  constructor(deps: ForkDeps) {
    this.#deps = deps;
  }

  copying(conversationId: string): boolean {
    return this.#copying.has(conversationId);
  }

  async fork(parentId: string, user: string, atSeq: number): Promise<{ conversation_id: string }> {
    const deps = this.#deps;
    await deps.reads.entryOf(parentId, user);
    const id = deps.newId();
    const events = await this.#parentEvents(parentId, atSeq, id);
    const { snapshot, checkpoints } = this.#fold(events);
    if (snapshot.status !== 'active')
      throw new IllegalTransitionError(
        `the conversation had ended at seq ${atSeq}: nothing to fork there`,
        agentStateOf(snapshot),
      );
    await deps.ownership.claimNew(id);
    this.#copying.add(id);
    try {
      // Before anything of the fork is stored: a marker without a record is what recovery purges.
      await deps.conversations.mark({ conversation_id: id, user, unsettled: true });
      await deps.secrets.load(parentId);
      await deps.secrets.keep(id, deps.secrets.of(parentId));
      await deps.runtimes.copyWorkspace?.(parentId, id);
      const lastSeq = await this.#copy(events, checkpoints);
      // Its entry-to-be, projected from its copied events; its first decision projects `conversation_forked`.
      const known = projectEntries(undefined, events);
      const nextEventId = events.at(-1)!.id + 1;
      const recordedState = lastRecordedState(events);
      const stored = { snapshot, lastSeq, nextEventId, history: events, recordedState };
      const first = {
        type: 'fork' as const,
        parent: parentId,
        seq: atSeq,
        folded: nextEventId,
        ...(recordedState !== undefined && { recordedState }),
      };
      const session = await Session.open(id, deps.sessionDeps(id, known), stored, first);
      deps.adopt(session);
      return { conversation_id: id };
    } catch (err) {
      deps.logger.warn('fork failed; removing what it stored', { conversation_id: id, ...errorFields(err) });
      await deps.purge(id, user).catch((cause: unknown) =>
        // The marker stays: recovery purges the rest.
        deps.logger.warn('a failed fork was not purged', { conversation_id: id, ...errorFields(cause) }),
      );
      throw err;
    } finally {
      this.#copying.delete(id);
    }
  }

  /** The parent's events through `atSeq` as the fork's (its conversation id), or BadSeqError. */
  async #parentEvents(parentId: string, atSeq: number, id: string): Promise<StoredEvent[]> {
    if (!(Number.isSafeInteger(atSeq) && atSeq >= 1)) throw new BadSeqError(parentId, atSeq);
    const read: LoggedEvent[] = [];
    for (let afterSeq = 0; ;) {
      const page = await this.#deps.log.read(parentId, { afterSeq, limit: Math.min(COPY_PAGE, atSeq - afterSeq) });
      for (const item of page.items) if (item.seq <= atSeq) read.push(item);
      const last = page.items.at(-1);
      if (!page.hasMore || last === undefined || last.seq >= atSeq) break;
      afterSeq = last.seq;
    }
    if (read.at(-1)?.seq !== atSeq) throw new BadSeqError(parentId, atSeq);
    return read.map(({ event }) => ({ ...event, conversation_id: id }));
  }

  /**
   * The fork's state after its copied events, and after each event where its
   * count passes a multiple of `checkpointEvery` (where the owner of a live
   * session writes a checkpoint): one fold.
   */
  #fold(events: readonly StoredEvent[]): { snapshot: SessionSnapshot; checkpoints: Map<number, SessionSnapshot> } {
    const every = this.#deps.checkpointEvery;
    const checkpoints = new Map<number, SessionSnapshot>();
    let snapshot: SessionSnapshot | undefined;
    for (let from = 0; from < events.length;) {
      // Up to the next multiple of `every` in the count of events.
      const to = Math.min(events.length, (Math.floor(from / every) + 1) * every);
      snapshot = foldEvents(events.slice(from, to), snapshot ? { from: snapshot } : {}).snapshot;
      if (to % every === 0) checkpoints.set(to - 1, snapshot);
      from = to;
    }
    return { snapshot: snapshot!, checkpoints };
  }

  /** Appends the copies in order, each expecting the one before it, and the checkpoints among them. */
  async #copy(events: readonly StoredEvent[], at: ReadonlyMap<number, SessionSnapshot>): Promise<number> {
    const { log, checkpoints } = this.#deps;
    let lastSeq = 0;
    const writes: Promise<void>[] = [];
    let settled: PromiseSettledResult<void>[];
    try {
      for (const [i, event] of events.entries()) {
        lastSeq = (await log.append(event, { expectedLastSeq: lastSeq })).seq;
        const snapshot = at.get(i);
        if (!snapshot) continue;
        writes.push(
          checkpoints.put({
            conversation_id: event.conversation_id,
            machine_version: SESSION_MACHINE_VERSION,
            seq: lastSeq,
            next_event_id: event.id + 1,
            snapshot: sessionMachine.getPersistedSnapshot(snapshot),
          }),
        );
      }
    } finally {
      // Every write done or failed before the caller goes on: a purge after a failure finds them all.
      settled = await Promise.allSettled(writes);
    }
    const failed = settled.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    return lastSeq;
  }
}
