import type { DeltaFrame, LoggedEvent, StatusFrame } from '../../protocol/index.ts';
import type {
  DeltaChannel,
  DeltaMessage,
  EventLog,
  LogSubscriber,
  LogSubscription,
  StatusChannel,
} from '../store/index.ts';
import { DeltaRoom, type HeldAttempt } from './deltaRoom.ts';

/** One listener of a conversation on this node (a client connection, say). */
export interface FeedMember {
  /** The conversation's stored events after `afterSeq`, then live ones, each once and in order (the log's subscription). */
  follow(afterSeq: number, subscriber: LogSubscriber): LogSubscription;
  /** The deltas this node holds of the conversation's current item (its newest attempt), or null. */
  deltas(): HeldAttempt | null;
  /** Asks the owner for the deltas of the attempt under way (a client joined while the agent runs). */
  catchUp(): void;
  /** No more status frames, deltas or events; the listener no longer counts. */
  leave(): void;
}

/** What a member is told as it comes: status frames, and that the room's deltas grew (`deltas()` has them). */
export interface FeedListenerHooks {
  status(frame: StatusFrame): void;
  deltas?(): void;
}

/** The owner's deltas of a conversation's current attempt, from index 0 (null: no owner has any). */
export type DeltaCatchUp = (conversationId: string) => Promise<readonly DeltaFrame[] | null>;

interface Room {
  members: Set<FeedListenerHooks>;
  deltas: DeltaRoom;
  /** A catch-up from the owner is under way. */
  catchingUp: boolean;
}

/** A listener of a conversation's events and status frames, for in-process use (benches, tools). */
export interface FeedListener {
  event(logged: LoggedEvent): void;
  status?(frame: StatusFrame): void;
}

/**
 * A node's live feed. Events come one way only: the event log's gapless
 * subscription, which one follow of the whole log feeds, whichever node
 * appended them (this one included). Status frames, transient and never
 * stored, come from the status channel, subscribed once per node and fanned
 * out here. It counts each conversation's listeners on this node, which the
 * passivation policy reads.
 */
export class ConversationFeed {
  readonly #log: EventLog;
  readonly #status: StatusChannel;
  readonly #deltas: DeltaChannel | undefined;
  readonly #catchUp: DeltaCatchUp | undefined;
  readonly #rooms = new Map<string, Room>();
  #unsubscribe: Array<() => void> | null = null;

  constructor(log: EventLog, status: StatusChannel, deltas?: { channel: DeltaChannel; catchUp: DeltaCatchUp }) {
    this.#log = log;
    this.#status = status;
    this.#deltas = deltas?.channel;
    this.#catchUp = deltas?.catchUp;
  }

  /** Joins a conversation: its status frames and deltas from now on go to `hooks`; its events once `follow` is called. */
  join(conversationId: string, hooks: FeedListenerHooks): FeedMember {
    this.#unsubscribe ??= [
      this.#status.subscribe((id, frame) => {
        for (const member of this.#rooms.get(id)?.members ?? []) member.status(frame);
      }),
      ...(this.#deltas ? [this.#deltas.subscribe((id, delta) => this.#delta(id, delta))] : []),
    ];
    let room = this.#rooms.get(conversationId);
    if (!room)
      this.#rooms.set(conversationId, (room = { members: new Set(), deltas: new DeltaRoom(), catchingUp: false }));
    const joined = room;
    // An object of its own per member, so that the same callback joining twice counts twice.
    const member: FeedListenerHooks = { ...hooks };
    joined.members.add(member);
    let subscription: LogSubscription | null = null;
    return {
      follow: (afterSeq, subscriber) => {
        subscription?.close();
        subscription = this.#log.subscribe(conversationId, afterSeq, subscriber);
        return subscription;
      },
      deltas: () => joined.deltas.held,
      catchUp: () => this.#askOwner(conversationId, joined),
      leave: () => {
        subscription?.close();
        subscription = null;
        joined.members.delete(member);
        if (joined.members.size === 0 && this.#rooms.get(conversationId) === joined) this.#rooms.delete(conversationId);
      },
    };
  }

  /**
   * A delta of a session this node runs, handed over in process: its clients
   * here get it without a trip through NATS (the copy that comes back from
   * NATS is then dropped as one already held).
   */
  deliverLocal(conversationId: string, delta: DeltaMessage): void {
    this.#delta(conversationId, delta);
  }

  /** A delta from the owner: kept in the room (when this node has listeners) and told to them. */
  #delta(conversationId: string, delta: DeltaMessage): void {
    const room = this.#rooms.get(conversationId);
    if (!room || !room.deltas.add(delta)) return;
    for (const member of room.members) member.deltas?.();
    if (room.deltas.hasHole) this.#askOwner(conversationId, room);
  }

  /**
   * The owner's deltas of the attempt under way, for a room that joined late
   * or missed some; asked again (up to 3 times, 50 ms apart) while a hole stays.
   */
  #askOwner(conversationId: string, room: Room, tries = 1): void {
    const catchUp = this.#catchUp;
    if (!catchUp || room.catchingUp) return;
    room.catchingUp = true;
    void catchUp(conversationId)
      .then((frames) => {
        if (frames && room.deltas.merge(frames)) for (const member of room.members) member.deltas?.();
      })
      .catch(() => undefined)
      .finally(() => {
        room.catchingUp = false;
        if (!room.deltas.hasHole || room.members.size === 0 || tries >= 3) return;
        setTimeout(() => this.#askOwner(conversationId, room, tries + 1), 50).unref();
      });
  }

  /**
   * Listens to a conversation's events after `afterSeq` and its status frames
   * (in-process listeners: benches and tools); returns the unsubscribe.
   */
  listen(conversationId: string, afterSeq: number, listener: FeedListener): { caughtUp: Promise<void>; stop(): void } {
    const member = this.join(conversationId, { status: (frame) => listener.status?.(frame) });
    const subscription = member.follow(afterSeq, {
      event: (logged) => {
        listener.event(logged);
      },
      failed: () => member.leave(),
    });
    return { caughtUp: subscription.caughtUp, stop: () => member.leave() };
  }

  /** This node's listeners of a conversation. */
  count(conversationId: string): number {
    return this.#rooms.get(conversationId)?.members.size ?? 0;
  }

  /** Sends a status frame to every node's listeners of the conversation (this one's included). */
  publishStatus(conversationId: string, frame: StatusFrame): void {
    this.#status.publish(conversationId, frame);
  }

  stop(): void {
    for (const unsubscribe of this.#unsubscribe ?? []) unsubscribe();
    this.#unsubscribe = null;
  }
}
